"""A small real tuning run to watch: ``kiln.autotune`` on one of bench/autotune.py's sets.

Run from the repository root on a machine with a GPU (``bench/record_tuning.sh`` runs it in a
100x30 terminal and records the screen)::

    python bench/record_tuning.py --set matmul

It tunes the set's kernel once (configs compile in kiln's pool and are timed in the GPU
sandbox), with what a user sees switched on: the progress bar (on a terminal; ``KILN_PROGRESS=1``
forces it elsewhere), kiln's log lines (``logging.basicConfig(level=logging.INFO)``), and, with
``TRITON_PRINT_AUTOTUNING=1``, Triton's own lines. The caches and tuning database are the ones
the environment names (``KILN_CACHE_DIR``, ``KILN_TUNING_DB``, ``TRITON_CACHE_DIR``): a second
run with the same ones finds the result in the database and says so.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=("matmul", "softmax"), default="matmul")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("kiln").setLevel(logging.INFO)  # kiln's lines only, not every library's

    import torch

    import autotune as sets  # bench/autotune.py: the kernels, configs and inputs
    import triton_kiln as kiln

    kernel, make_configs, make_case = sets.SETS[args.set]
    call, check, keys = make_case()
    configs = make_configs()
    tuned = kiln.autotune(configs, key=keys)(kernel)
    started = time.perf_counter()
    call(tuned)
    torch.cuda.synchronize()
    wall = time.perf_counter() - started
    print(f"first call returned after {wall:.1f} s; max error vs torch {check():.3g}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
