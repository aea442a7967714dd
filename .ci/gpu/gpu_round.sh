#!/usr/bin/env bash
# One GPU round on the device machine: GPU tests, the demo, compile_batch for the local GPU and
# (LAUNCH_BENCH=1) bench/launch.py with its bundle part.
# Usage (from the repository root, on the device): bash .ci/gpu/gpu_round.sh SETS REPEATS
#   SETS: all | matmul | softmax ; REPEATS: repeats for compile_batch (medians are reported)
#   SKIP_TESTS=1: no GPU tests or demo; LAUNCH_BENCH=1: also bench/launch.py --bundle
# Wheels for psutil/tqdm/click/pytest-timeout travel in .whl/ (the device has no network).
set -uo pipefail
sets=${1:-all}
repeats=${2:-3}
out=${OUT:-/tmp/kiln-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee "$out/device.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider tests/ 2>&1 | tee "$out/gpu-tests.log" | tail -15
  python3 -m triton_kiln demo --workers 16 2>&1 | tee "$out/demo.log" | tail -6
fi
python3 bench/compile_batch.py --set "$sets" --repeats "$repeats" --json "$out/compile_batch-$sets.json" \
  2> "$out/compile_batch-$sets.err" > /dev/null
tail -20 "$out/compile_batch-$sets.err"
if [ "${LAUNCH_BENCH:-0}" = 1 ]; then
  python3 bench/launch.py --bundle --json "$out/launch.json" 2> "$out/launch.err" | tail -30
  tail -5 "$out/launch.err"
fi
