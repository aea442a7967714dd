#!/usr/bin/env bash
# Two .ci/gpu/gpu_session.sh runs side by side on a machine with two GPUs (the device's
# nvidia-h200-x2), each holding one GPU and half the cores, as a one-GPU machine would
# (CUDA_VISIBLE_DEVICES, taskset, KILN_WORKERS); logs and JSON under $OUT/a and $OUT/b. From the
# repository root on the device:
#   A_ENV="IB_RUN=8" B_ENV="IB_RUN=9" bash .ci/gpu/gpu_pair.sh "inductor-block-1" "inductor-block-1"
# Each side's phases are one word list; A_ENV / B_ENV hold that side's extra variables. It waits
# for both sides by process id (a `pgrep -f` on a phase's script also matches the command that
# waits, and never returns), then prints both sides' output. Exit status: 0 if both sides did.
# Files back from the device: each side's device.txt, logs and JSON count towards its 8-file limit.
# Compile-bound figures are not those of a one-GPU machine here: Liger MoE's kiln first call
# takes 11.5-13.3 s beside another job against 9.2 s alone on a one-GPU H200 (its compiles and
# plain-JIT compiles 28-51% slower). Pair runs whose ratio is not compile-bound, or take a
# first-call target from a one-GPU machine.
set -uo pipefail
if [ $# -ne 2 ]; then
  echo "usage: [A_ENV=...] [B_ENV=...] bash .ci/gpu/gpu_pair.sh 'PHASES for GPU 0' 'PHASES for GPU 1'" >&2
  exit 2
fi
gpus=$(nvidia-smi --list-gpus 2>/dev/null | wc -l)
if [ "$gpus" -lt 2 ]; then
  echo ".ci/gpu/gpu_pair.sh: needs two GPUs, found $gpus: run .ci/gpu/gpu_session.sh alone" >&2
  exit 2
fi
out=${OUT:-/tmp/kiln-out}
# the wheels once, here: two installs into one --target at once can collide
OUT=/tmp/gpu-pair-install bash .ci/gpu/gpu_session.sh >/dev/null || exit 1
export GPU_SESSION_INSTALLED=1
cores=$(nproc)
half=$((cores / 2))
side() {  # side NAME GPU FIRST_CORE LAST_CORE EXTRA_ENV PHASES
  mkdir -p "$out/$1"
  # shellcheck disable=SC2086  # the extra variables and the phases are word lists
  env OUT="$out/$1" CUDA_VISIBLE_DEVICES="$2" KILN_WORKERS="$half" $5 \
    taskset -c "$3-$4" bash .ci/gpu/gpu_session.sh $6 >"/tmp/gpu-pair-$1.txt" 2>&1
}
side a 0 0 $((half - 1)) "${A_ENV:-}" "$1" &
a=$!
side b 1 "$half" $((cores - 1)) "${B_ENV:-}" "$2" &
b=$!
status=0
wait "$a" || status=$?
wait "$b" || status=$?
for name in a b; do
  echo "=== side $name"
  cat "/tmp/gpu-pair-$name.txt"
done
exit "$status"
