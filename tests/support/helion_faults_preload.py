"""Preload this module (``CompilePool(preload=["support.helion_faults_preload"])``) to give a pool's
workers the Helion abort hook of :mod:`helion_faults`; importing it installs the hook."""

from __future__ import annotations

from support import helion_faults

helion_faults.install()
