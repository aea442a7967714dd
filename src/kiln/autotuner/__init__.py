"""kiln's autotuner: ``triton.autotune``'s contract on kiln's pool, sandbox and database."""

from kiln.autotuner.tuner import AutotuneError, Autotuner, autotune

__all__ = ["AutotuneError", "Autotuner", "autotune"]
