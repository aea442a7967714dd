"""The benchmark sandbox: a spawned GPU process per device that times configs for the tuner."""

from kiln.sandbox.client import BenchOutcome, BenchSpec, Sandbox

__all__ = ["BenchOutcome", "BenchSpec", "Sandbox"]
