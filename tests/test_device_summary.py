"""The output check on the GPU, what can be tested without one.

* The summary's format and its reduction into the verdict: a numpy model of the kernel
  (``kiln.sandbox.compare_kernel``: grid-stride programs, one row of partials each) on many
  random cases (NaN, Inf, near the tolerance, overflow, integers, bool) gives, through
  :meth:`Summary.reduce` and :func:`measured`, the same verdict as the host rule
  (``compare_np.compare``) and the same NaN/Inf finding (``compare_np.produced_nonfinite``).
* The kernel compiles for sm_90 through kiln's compile pool, every variant.
(``tests/test_output_rule_gpu.py::test_device_summary_equals_the_host_rule`` runs the kernel.)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from support.basics import SM90
from triton_kiln import CompileRequest
from triton_kiln.sandbox import compare_np
from triton_kiln.sandbox.device_summary import SLOTS, Summary, measured, produced_nonfinite

KINDS = {  # dtype -> (numpy storage, kernel kind)
    "torch.float16": (np.float16, 2),
    "torch.bfloat16": (np.uint16, 3),
    "torch.float32": (np.float32, 4),
    "torch.float64": (np.float64, 5),
    "torch.int32": (np.int32, 0),
    "torch.bool": (np.bool_, 1),
}
BLOCK, PROGRAMS = 64, 5  # small, so that the grid-stride loop and the folding of rows are exercised


def _values(words: Any, dtype: str) -> Any:
    return compare_np.decode(words, dtype).values


def model_rows(out: Any, ref: Any, before: Any, dtype: str) -> list[list[float]]:
    """The kernel, in numpy: each program's row of partials over its grid-stride blocks."""
    kind = KINDS[dtype][1]
    n = out.size
    programs = max(1, min(PROGRAMS, -(-n // BLOCK)))
    rows = []
    for pid in range(programs):
        index = np.concatenate(
            [np.arange(s, min(s + BLOCK, n)) for s in range(pid * BLOCK, n, programs * BLOCK)]
            or [np.arange(0)]
        )
        o, r, b = out[index], ref[index], before[index]
        row = [0.0] * SLOTS
        if kind == 0:
            row[0] = float(np.count_nonzero(o != r))
        elif kind == 1:
            row[0] = float(np.count_nonzero((o != 0) != (r != 0)))
        else:
            row[0] = float(np.count_nonzero(o.view(f"u{o.itemsize}") != r.view(f"u{r.itemsize}")))
            wide = np.float32 if kind in (2, 3) else np.float64
            a, c = _values(o, dtype).astype(wide), _values(r, dtype).astype(wide)
            with np.errstate(all="ignore"):
                d = np.abs(a - c)
                fine = d < np.inf
                row[1] = float(np.count_nonzero(~fine))
                row[2] = float(np.max(np.where(fine, d, 0), initial=0))
                row[3] = float(np.max(np.where(np.abs(c) < np.inf, np.abs(c), 0), initial=0))
                a64, c64 = a.astype(np.float64), c.astype(np.float64)
                a_nan, c_nan = np.isnan(a64), np.isnan(c64)
                row[4] = float(np.count_nonzero(a_nan & ~c_nan))
                both = ~a_nan & ~c_nan
                row[5] = float(np.count_nonzero(both))
                d64 = np.abs(a64 - c64)
                row[6] = float(np.count_nonzero(both & np.isnan(d64)))
                row[7] = float(np.max(np.where(both & ~np.isnan(d64), d64, 0), initial=0))
                row[8] = float(np.max(np.where(both, np.abs(c64), 0), initial=0))
                before64 = _values(b, dtype).astype(np.float64)
                row[9] = float(np.count_nonzero(~(np.abs(a64) < np.inf) & (np.abs(before64) < np.inf)))
        rows.append(row)
    return rows


def _float_words(values: Any, dtype: str) -> Any:
    if dtype == "torch.bfloat16":
        return (np.asarray(values, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return np.asarray(values, dtype=KINDS[dtype][0])


def random_case(rng: np.random.Generator, dtype: str) -> tuple[Any, Any, Any]:
    """(output, reference, before) as stored words, with one of the cases the rule cares about."""
    n = int(rng.choice([1, 7, 64, 300, 1000]))
    if dtype == "torch.int32":
        ref = rng.integers(-5, 5, n).astype(np.int32)
        out = ref.copy()
        if rng.random() < 0.6:
            out[rng.integers(0, n, max(1, n // 10))] += 1
        return out, ref, ref.copy()
    if dtype == "torch.bool":
        ref = rng.random(n) < 0.5
        out = ref.copy()
        if rng.random() < 0.5:
            out[rng.integers(0, n)] ^= True
        return out, ref, ref.copy()
    scale = float(rng.choice([1e-3, 1.0, 100.0, 6e4 if dtype == "torch.float16" else 3e38]))
    ref = rng.standard_normal(n) * scale
    out = ref.copy()
    case = rng.integers(0, 9)
    if case == 1:  # near the tolerance
        out = ref + rng.standard_normal(n) * scale * float(rng.choice([1e-4, 1e-3, 1e-2, 3e-2]))
    elif case == 2:  # NaN in the output where the reference has a number
        out[rng.integers(0, n)] = np.nan
    elif case == 3:  # NaN at the same places on both sides
        where = rng.integers(0, n, max(1, n // 5))
        ref[where] = np.nan
        out[where] = np.nan
    elif case == 4:  # Inf on both sides (Inf - Inf) and on one side
        where = rng.integers(0, n)
        ref[where] = np.inf
        out[where] = np.inf if rng.random() < 0.5 else -np.inf
    elif case == 5:  # everything NaN
        ref[:] = np.nan
        out[:] = np.nan
    elif case == 6:  # opposite signs at the largest values: the wide difference overflows
        out = -ref
    elif case == 7:  # NaN in the reference only
        ref[rng.integers(0, n)] = np.nan
    before = ref.copy()
    if rng.random() < 0.3:
        before[rng.integers(0, n)] = np.inf
    with np.errstate(all="ignore"):
        return _float_words(out, dtype), _float_words(ref, dtype), _float_words(before, dtype)


@pytest.mark.parametrize("dtype", list(KINDS))
def test_the_summary_gives_the_host_rules_verdict(dtype: str) -> None:
    rng = np.random.default_rng(hash(dtype) % 2**32)
    floating = "float" in dtype
    seen = set()
    for _ in range(400):
        out, ref, before = random_case(rng, dtype)
        summary = Summary.reduce(model_rows(out, ref, before, dtype))
        host_out, host_ref = compare_np.decode(out, dtype), compare_np.decode(ref, dtype)
        for tolerances in (None, (1e-2, 1e-2)):
            expected = compare_np.compare({"x": host_out}, {"x": host_ref}, tolerances)
            got = compare_np.judge(
                {"x": host_out},
                {"x": host_ref},
                tolerances,
                compare_np._describe,
                lambda a, b, s=summary: measured(s, floating),
            )
            assert (got.ok, got.detail) == (expected.ok, expected.detail)
            assert got.max_abs_diff == expected.max_abs_diff or (
                np.isnan(got.max_abs_diff) and np.isnan(expected.max_abs_diff)
            )
            seen.add((expected.ok, expected.detail.split(":")[1][:12] if expected.detail else ""))
        before_host = compare_np.decode(before, dtype)
        assert produced_nonfinite(summary, floating) == compare_np.produced_nonfinite(
            host_out, lambda b=before_host: b
        )
    assert len(seen) >= (3 if floating else 2)  # passes, fails, and (floats) NaN fails were met


def test_rows_fold_into_one_summary() -> None:
    rows = [[1, 0, 0.5, 2.0, 0, 10, 0, 0.5, 2.0, 0], [2, 1, 0.25, 3.0, 1, 5, 1, 7.0, 1.0, 3]]
    assert Summary.reduce(rows) == Summary(3, 1, 0.5, 3.0, 1, 15, 1, 7.0, 2.0, 3)
    assert Summary.reduce([]) == Summary(0)
    with pytest.raises(ValueError, match="10 numbers"):
        Summary.reduce([[1.0, 2.0]])


def test_every_variant_of_the_kernel_compiles_for_sm90_in_kilns_pool(make_pool: Any) -> None:
    from triton_kiln.sandbox import compare_kernel

    pool = make_pool(workers=2)
    requests = {
        (kind, pointer): CompileRequest(
            compare_kernel.output_summary_kernel,
            compare_kernel.signature(pointer),
            {"KIND": kind, "BLOCK": compare_kernel.BLOCK},
            options={"num_warps": 4},
            target=SM90,
        )
        for kind, pointer in compare_kernel.VARIANTS.values()
    }
    for (kind, pointer), future in {k: pool.submit(r) for k, r in requests.items()}.items():
        artifact = future.result(timeout=300)
        assert artifact.binary[:4] == b"\x7fELF", (kind, pointer)
        assert artifact.name == "output_summary_kernel"


def test_the_fingerprint_kernel_compiles_for_sm90_in_kilns_pool(make_pool: Any) -> None:
    from triton_kiln.autotuner import compare_kernels
    from triton_kiln.sandbox import compare_kernel

    request = compare_kernels.requests(SM90, ["torch.bfloat16"])[compare_kernel.FINGERPRINT]
    artifact = make_pool(workers=1).submit(request).result(timeout=300)
    assert artifact.binary[:4] == b"\x7fELF"
    assert artifact.name == "fingerprint_kernel"


FINGERPRINT_RUN = """
import sys
import numpy as np
import torch
from triton_kiln.sandbox import compare_kernel as kernel
from triton_kiln.sandbox.compare import word_sum

for nbytes in map(int, sys.argv[1:]):
    data = np.random.default_rng(nbytes).integers(0, 256, size=nbytes, dtype=np.uint8)
    words = torch.from_numpy(data.copy()).view(torch.uint64)
    grid = kernel.programs(words.numel())
    shares = torch.zeros(grid, dtype=torch.uint64)
    kernel.fingerprint_kernel[(grid,)](words, shares, words.numel(), BLOCK=kernel.BLOCK)
    device = int(shares.numpy().sum(dtype=np.uint64))
    print(nbytes, device == word_sum(data.tobytes()), flush=True)
"""


def test_the_fingerprint_kernel_computes_the_hosts_word_sum() -> None:
    """The kernel itself, run by Triton's interpreter (numpy), against the host's word sum: the
    native sandbox names an output on the GPU with it, the host and the torch sandbox with
    ``word_sum``, and both must give the same bytes the same name (on a GPU:
    tests/test_device_check_gpu.py compares the two sandboxes' names)."""
    import os
    import subprocess
    import sys

    sizes = [8, 8 * 1024, 8 * (264 * 1024 + 5)]  # one word; one block; more blocks than programs
    done = subprocess.run(
        [sys.executable, "-c", FINGERPRINT_RUN, *map(str, sizes)],
        env={**os.environ, "TRITON_INTERPRET": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [word for size in sizes for word in (str(size), "True")]
