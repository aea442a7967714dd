"""Imported first in kiln's Inductor sidecar by the sidecar tests (``Sidecar(preload=...)``):
the same one fake as ``inductor_support.fake_gpu``, for a process on a machine with no GPU.
Inductor's generated modules ask Triton for an active GPU driver; every compile still targets
sm_90 (the fixtures' DeviceProperties), for real."""

from __future__ import annotations

from torch._inductor.runtime import triton_helpers

triton_helpers.set_driver_to_gpu = lambda: None
