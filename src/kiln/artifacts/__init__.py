"""Compiled artifacts: the binary and metadata of one compile, and the on-disk store."""
