"""Compiled artifacts: the binary and metadata of one compile (artifact), the on-disk store
(store), and Triton's own file layout of them, from which Triton loads a kernel (triton_files)."""
