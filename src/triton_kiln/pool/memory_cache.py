"""The pool's memory cache: recently finished artifacts, bounded in bytes, least recently used out.

A repeated request is answered from here before the disk cache or a worker is asked. What is
kept is what a launch needs: the binary and the metadata. The text IRs (LLVM IR, TTIR, TTGIR,
PTX; most of an artifact's size: 1.8 of 2 MB for a 256x256 matmul) are dropped unless
``KILN_KEEP_IR=1`` (:attr:`Settings.keep_ir`); the disk entry keeps them, and
:meth:`triton_kiln.ArtifactStore.get` reads them back. The bound is ``KILN_MEMORY_CACHE_MB``
(:attr:`Settings.memory_cache_mb`), counted with :attr:`CompiledArtifact.nbytes`; an artifact
larger than the whole bound is not kept.

The whole artifact (IRs included) is also referenced weakly: while its caller still holds it, a
hit returns that very object (so ``pool.submit(r).result() is pool.compile(r)`` holds, and its
IRs cost nothing extra: the caller keeps them alive, not the cache); once the caller lets go,
a hit returns the copy without IRs.

Not thread-safe on its own: the pool's :class:`~triton_kiln.pool.jobs.JobTable` calls it under its lock.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

from triton_kiln.artifacts.artifact import CompiledArtifact

_Entry = tuple[CompiledArtifact, int, "weakref.ref[CompiledArtifact] | None"]


class MemoryCache:
    """Artifacts by key, at most ``max_bytes`` of them, least recently used evicted first."""

    def __init__(self, max_bytes: int, *, keep_ir: bool = False) -> None:
        self.max_bytes = max_bytes
        self.keep_ir = keep_ir
        self.nbytes = 0
        self.evictions = 0
        # key -> (what is kept, its size, the whole artifact while someone else holds it)
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def get(self, key: str) -> CompiledArtifact | None:
        """The artifact for ``key`` (now the most recently used), or ``None``."""
        found = self._entries.get(key)
        if found is None:
            return None
        self._entries.move_to_end(key)
        kept, _, whole = found
        alive = whole() if whole is not None else None
        return alive if alive is not None else kept

    def put(self, artifact: CompiledArtifact) -> CompiledArtifact:
        """Keep ``artifact`` (without its IRs unless ``keep_ir``); returns what is kept."""
        kept = artifact if self.keep_ir else artifact.without_ir()
        whole = weakref.ref(artifact) if kept is not artifact else None
        size = kept.nbytes
        self.discard(kept.key)
        if size > self.max_bytes:
            return kept
        while self._entries and self.nbytes + size > self.max_bytes:
            _, (_, old_size, _) = self._entries.popitem(last=False)
            self.nbytes -= old_size
            self.evictions += 1
        self._entries[kept.key] = (kept, size, whole)
        self.nbytes += size
        return kept

    def discard(self, key: str) -> None:
        found = self._entries.pop(key, None)
        if found is not None:
            self.nbytes -= found[1]

    def __contains__(self, key: str) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[str]:
        """Keys, least recently used first."""
        return list(self._entries)
