"""Preload this module (``CompilePool(preload=["helion_faults_preload"])``) to give a pool's
workers the Helion abort hook of :mod:`helion_faults`; importing it installs the hook."""

from __future__ import annotations

import helion_faults

helion_faults.install()
