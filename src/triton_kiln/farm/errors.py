"""The compile farm's own errors (kiln's job errors, :mod:`triton_kiln.errors`, are used as they are)."""

from __future__ import annotations

from triton_kiln.errors import JobFailure, KilnError


class FarmError(KilnError):
    """The compile farm cannot be used: Ray is not installed, or the cluster cannot be reached."""


class NodeLostError(JobFailure):
    """The Ray node running this job died (or left the cluster) on every try."""

    what = "was lost with its Ray node"
    advice = (
        "kiln re-ran it on other nodes and gave up; check the cluster's nodes (`ray status`), "
        "or raise RayCompilePool(node_retries=...)"
    )


class FarmTaskError(JobFailure):
    """The Ray call running this job failed for a reason of Ray's (not the compile's)."""

    what = "failed in its Ray call"
    advice = "the job was skipped; the Ray error is above"


class NoNodeError(FarmError):
    """No node of the Ray cluster can compile: none has a CPU, or none could start kiln's actor."""
