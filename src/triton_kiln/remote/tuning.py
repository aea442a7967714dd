"""Finished tuning runs in Redis, so a second machine tunes nothing: a tuning database that reads
through to the remote on a miss and writes each finished run to it.

::

    lookup(identity)    local database? -> its run
        miss -> GET kiln:r1:tuning:s<schema>:<sha256(identity)>
             -> refused unread if over KILN_REMOTE_MAX_ENTRY_MB (client.py)
             -> records.tuning_run (a typed, bounded, depth-limited record, then
                TuningRun.from_json), its identity equal to the one asked for, finished
             -> TuningDatabase.import_run: recorded locally in one transaction (so the next
                lookup is local) and returned; else one CacheWarning and a miss, nothing recorded
    finish_run(run)     finished locally -> the run as the local database holds it -> SET (JSON)

A run is data (which config was fastest, its timings), not code: the binary of its best config
is fetched and verified like any other artifact when the autotuner launches it. A run that fails
validation is never adopted: the kernel is tuned here as if the remote had none.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from triton_kiln.artifacts.store import CacheWarning
from triton_kiln.remote import records
from triton_kiln.remote.client import EntryRefused, RedisClient
from triton_kiln.remote.names import tuning_name
from triton_kiln.remote.records import BadEntry
from triton_kiln.remote.signing import Signer, signed_value
from triton_kiln.tuning.db import TuningDatabase
from triton_kiln.tuning.results import ConfigResult, TuningRun
from triton_kiln.tuning.schema import TuningDatabaseError

_IDENTITY = ("kernel_key", "key_repr", "device_name", "capability", "triton_version")


class RemoteTuningDatabase:
    """A :class:`~triton_kiln.tuning.TuningDatabase` (``local``) with a remote behind it (see above)."""

    def __init__(
        self,
        local: TuningDatabase,
        client: RedisClient,
        *,
        ttl_s: int | None,
        signer: Signer | None = None,
        max_entry_bytes: int = 16 << 20,
    ) -> None:
        self.local = local
        self.max_entry_bytes = max_entry_bytes
        """A run read from the remote larger than this is refused unread (``KILN_REMOTE_MAX_ENTRY_MB``)."""
        self.signer = signer
        self.path: Path = local.path
        self.client = client
        self.where = client.where
        self.ttl_s = ttl_s
        self._identities: dict[int, dict[str, str]] = {}  # run id -> its lookup identity
        self.imported = 0
        """Runs taken from the remote into the local database."""
        self.published = 0
        """Finished runs the server took."""

    def lookup(
        self, kernel_key: str, key_repr: str, device_name: str, capability: str, triton_version: str
    ) -> TuningRun | None:
        found = self.local.lookup(kernel_key, key_repr, device_name, capability, triton_version)
        if found is not None:
            return found
        values = (kernel_key, key_repr, device_name, capability, triton_version)
        identity = dict(zip(_IDENTITY, values, strict=True))
        name = tuning_name(identity)
        try:
            raw = self.client.read_value(name, self.ttl_s, self.max_entry_bytes)
            if raw is None:
                return None
            payload = records.verified_payload(raw, name, self.signer)
            self.local.import_run(_checked_run(payload, identity))
        except (EntryRefused, ValueError, TypeError, TuningDatabaseError) as exc:  # BadEntry is a ValueError
            warnings.warn(
                f"kiln: the remote cache {self.where} holds an invalid tuning run for "
                f"{identity['key_repr'][:200]} at {name} ({exc}); it is ignored, the kernel is tuned "
                f"here, and the run tuned here replaces it",
                CacheWarning,
                stacklevel=2,
            )
            return None
        self.imported += 1
        return self.local.lookup(kernel_key, key_repr, device_name, capability, triton_version)

    # -- writing: the local database, then the finished run to the remote -------------------

    def begin_run(
        self,
        kernel: str,
        kernel_key: str,
        key_repr: str,
        device_name: str,
        capability: str,
        triton_version: str,
        default_label: str | None,
    ) -> int:
        run_id = self.local.begin_run(
            kernel, kernel_key, key_repr, device_name, capability, triton_version, default_label
        )
        values = (kernel_key, key_repr, device_name, capability, triton_version)
        self._identities[run_id] = dict(zip(_IDENTITY, values, strict=True))
        return run_id

    def record(self, run_id: int, result: ConfigResult) -> None:
        self.local.record(run_id, result)

    def finish_run(
        self,
        run_id: int,
        best_label: str | None,
        wall_s: float | None,
        first_result_s: float | None,
        *,
        split: Mapping[str, float] | None = None,
        gpu_peak_bytes: int | None = None,
    ) -> None:
        self.local.finish_run(
            run_id, best_label, wall_s, first_result_s, split=split, gpu_peak_bytes=gpu_peak_bytes
        )
        identity = self._identities.pop(run_id, None)
        run = self.local.lookup(**identity) if identity is not None else None
        if run is None or run.run_id != run_id:
            return  # begun through another handle, or a newer run finished meanwhile
        name = tuning_name(identity or {})
        data = json.dumps(run.to_json(), allow_nan=False).encode()
        if self.client.write_value(name, signed_value(self.signer, name, data), self.ttl_s):
            self.published += 1

    # -- the rest is the local database's ---------------------------------------------------

    def runs(self, kernel: str | None = None, limit: int = 100) -> list[TuningRun]:
        return self.local.runs(kernel, limit)

    def close(self) -> None:
        self.local.close()

    def __enter__(self) -> RemoteTuningDatabase:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteTuningDatabase({self.local!r}, {self.where!r})"


def _checked_run(raw: bytes, identity: Mapping[str, str]) -> TuningRun:
    """The run in ``raw``, validated, for exactly ``identity`` and finished (else :class:`BadEntry`)."""
    run = records.tuning_run(raw)
    for name, wanted in identity.items():
        if getattr(run, name) != wanted:
            raise BadEntry(f"the run's {name} is {str(getattr(run, name))[:80]!r}, not {wanted[:80]!r}")
    if not run.finished:
        raise BadEntry("the run is not finished")
    return run
