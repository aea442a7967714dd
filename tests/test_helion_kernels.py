"""Helion kernels for kiln's Helion tests and ``bench/helion_autotune.py`` (a module: Helion reads it).

``add``, ``softmax``, ``matmul``, ``layer_norm`` and ``many_configs`` (a 2-D kernel with a loop
and a reduction, so its search space is large) are healthy; ``crashy_add`` aborts in Triton's compiler for
configs with ``num_warps == helion_faults.ABORT_NUM_WARPS`` and ``crashall_add`` for every
config; ``faulty_add``'s configs of :data:`helion_faults.FAULTY_CONFIGS` abort in the compiler,
make an illegal memory access or never finish when launched (only where
``helion_faults.install()`` ran: see that module).

Every kernel is built by :func:`make`, so tests and the benchmark choose the settings
(``autotuner_fn``, effort, precompile mode) per use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("helion", reason="Helion is an optional integration: pip install -e '.[helion]'")

import helion
import helion.language as hl
import torch


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


def crashy_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


def crashall_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


def faulty_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    for tile in hl.tile(out.size()):
        out[tile] = x[tile] + y[tile]
    return out


def softmax(x: torch.Tensor) -> torch.Tensor:
    n, _m = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        values = x[tile_n, :]
        amax = torch.amax(values, dim=1, keepdim=True)
        exp = torch.exp(values - amax)
        out[tile_n, :] = exp / torch.sum(exp, dim=1, keepdim=True)
    return out


def matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    m, k = x.size()
    _k, n = y.size()
    out = torch.empty([m, n], dtype=x.dtype, device=x.device)
    for tile_m, tile_n in hl.tile([m, n]):
        acc = hl.zeros([tile_m, tile_n], dtype=torch.float32)
        for tile_k in hl.tile(k):
            acc = torch.addmm(acc, x[tile_m, tile_k], y[tile_k, tile_n])
        out[tile_m, tile_n] = acc.to(x.dtype)
    return out


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Each row normalized to mean 0 and variance 1 (in float32), then scaled and shifted."""
    m, _n = x.size()
    out = torch.empty_like(x)
    for tile_m in hl.tile(m):
        row = x[tile_m, :].to(torch.float32)
        mean = torch.mean(row, dim=-1, keepdim=True)
        centered = row - mean
        var = torch.mean(centered * centered, dim=-1, keepdim=True)
        normalized = centered * torch.rsqrt(var + 1e-5)
        out[tile_m, :] = (normalized * weight[:].to(torch.float32) + bias[:].to(torch.float32)).to(x.dtype)
    return out


def many_configs(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Row-scaled, bias-added, then each row normalized by its sum of squares."""
    n, m = x.size()
    out = torch.empty_like(x)
    for tile_n in hl.tile(n):
        acc = hl.zeros([tile_n], dtype=torch.float32)
        for tile_m in hl.tile(m):
            v = x[tile_n, tile_m].to(torch.float32) * w[tile_m].to(torch.float32)
            acc = acc + torch.sum(v * v, dim=1)
        scale = torch.rsqrt(acc / m + 1e-6)
        for tile_m in hl.tile(m):
            v = x[tile_n, tile_m].to(torch.float32) * w[tile_m].to(torch.float32)
            out[tile_n, tile_m] = (v * scale[:, None]).to(x.dtype)
    return out


def eager(name: str) -> Callable[..., torch.Tensor]:
    """A PyTorch reference for kernel ``name`` (Helion's ``autotune_baseline_fn`` on the CPU)."""

    def many(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        v = x.float() * w.float()
        return (v * torch.rsqrt((v * v).mean(dim=1, keepdim=True) + 1e-6)).to(x.dtype)

    table: dict[str, Callable[..., torch.Tensor]] = {
        "add": torch.add,
        "crashy_add": torch.add,
        "crashall_add": torch.add,
        "faulty_add": torch.add,
        "softmax": lambda x: torch.softmax(x.float(), dim=1).to(x.dtype),
        "matmul": torch.matmul,
        "layer_norm": lambda x, w, b: torch.nn.functional.layer_norm(
            x.float(), (x.size(1),), w.float(), b.float(), 1e-5
        ).to(x.dtype),
        "many_configs": many,
    }
    return table[name]


def make(name: str, **settings: Any) -> Any:
    """A fresh ``helion.kernel`` of ``name`` with ``settings``."""
    fn = globals()[name]
    return helion.kernel(static_shapes=True, **settings)(fn)


def inputs(name: str, scale: int = 1, device: str = "cpu") -> tuple[torch.Tensor, ...]:
    """Example arguments for ``name`` (``scale`` multiplies the sizes; the GPU bench uses more)."""
    gen = torch.Generator(device="cpu").manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float16).to(device)

    if name in ("add", "crashy_add", "crashall_add", "faulty_add"):
        return randn(1024 * scale, 1024), randn(1024 * scale, 1024)
    if name == "softmax":
        return (randn(512 * scale, 1024),)
    if name == "matmul":
        return randn(512 * scale, 512), randn(512, 512 * scale)
    if name == "layer_norm":
        return randn(512 * scale, 1024), randn(1024), randn(1024)
    if name == "many_configs":
        return randn(256 * scale, 2048), randn(2048)
    raise KeyError(name)
