"""kiln's version (one place; `triton_kiln.__version__` and bundle manifests read it)."""

__version__ = "0.1.0"
