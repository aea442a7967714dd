"""Compiled artifacts: the binary and metadata of one compile (artifact), the on-disk store
(store), and Triton's own file layout of them, from which Triton loads a kernel (triton_files).

Modules: :mod:`.artifact` (``CompiledArtifact``), :mod:`.store` (the store on disk, atomic, with
a remote cache behind it when one is given), :mod:`.store_entry` (one entry of the store and
its one reader), :mod:`.confined` (files read without following links or leaving the entry),
:mod:`.record` (``artifact.json`` parsed), :mod:`.usage` (sizes, last use, eviction),
:mod:`.triton_files` (Triton's layout) and :mod:`.triton_seed` (an artifact written into
Triton's own cache).

Imports: only :mod:`triton_kiln.errors` and :mod:`triton_kiln.triton_compat` (a remote cache
reaches the store as an object it is given); the pool, the farm, the sandbox, the launcher,
bundles and the integrations build on this package."""
