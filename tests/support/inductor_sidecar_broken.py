"""Imported first in kiln's Inductor sidecar by the start-failure test: the sidecar cannot start."""

raise ImportError("inductor_sidecar_broken: this sidecar was made not to start (a test)")
