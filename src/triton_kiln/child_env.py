"""The ``KILN_*`` variables kiln sets in its own child processes: not settings, never read from the
user's environment, and never reported as unknown names.

Each child interpreter (the zygote, the three sandboxes, the Inductor sidecar) finds the socket to
its parent in its ``*_FD`` variable and its parent's pid in its ``*_PARENT`` variable
(:func:`triton_kiln.procs.parent_channel`); every process of a pool carries the pool's id in
:data:`POOL_ID`, so a leak check finds them.
"""

from __future__ import annotations

POOL_ID = "KILN_POOL_ID"
"""Marks every process of a pool (pool/handles.py)."""

ZYGOTE_FD = "KILN_ZYGOTE_FD"
ZYGOTE_PARENT = "KILN_ZYGOTE_PARENT"
SANDBOX_FD = "KILN_SANDBOX_FD"
SANDBOX_PARENT = "KILN_SANDBOX_PARENT"
NATIVE_SANDBOX_FD = "KILN_NATIVE_SANDBOX_FD"
NATIVE_SANDBOX_PARENT = "KILN_NATIVE_SANDBOX_PARENT"
CALL_SANDBOX_FD = "KILN_CALL_SANDBOX_FD"
CALL_SANDBOX_PARENT = "KILN_CALL_SANDBOX_PARENT"
INDUCTOR_SIDECAR_FD = "KILN_INDUCTOR_SIDECAR_FD"
INDUCTOR_SIDECAR_PARENT = "KILN_INDUCTOR_SIDECAR_PARENT"

CHILD_FD_VARIABLES = (ZYGOTE_FD, SANDBOX_FD, NATIVE_SANDBOX_FD, CALL_SANDBOX_FD, INDUCTOR_SIDECAR_FD)
"""Set in kiln's own interpreters: the zygote (and its forked workers), the three sandboxes and
the Inductor sidecar (until it has read it)."""

INTERNAL_VARIABLES = frozenset(
    {
        POOL_ID,
        *CHILD_FD_VARIABLES,
        ZYGOTE_PARENT,
        SANDBOX_PARENT,
        NATIVE_SANDBOX_PARENT,
        CALL_SANDBOX_PARENT,
        INDUCTOR_SIDECAR_PARENT,
    }
)
"""Every variable kiln sets in its own child processes."""
