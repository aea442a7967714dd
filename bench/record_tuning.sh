#!/usr/bin/env bash
# Record a real tuning run as a user sees it, in a 100x30 terminal: kiln's progress bar mid-run
# and at the end, kiln's log lines, then a second run that finds the result in the database.
#
# Usage (from the repository root, on the GPU machine): bash bench/record_tuning.sh [SET]
#   SET: matmul (72 configs, the default) | softmax (32 configs). Takes well under 2 minutes.
# Writes into $OUT (default /tmp/kiln-out), at most 5 files:
#   tuning-frames.txt  every distinct screen, with the seconds since the start (tmux only)
#   tuning-mid.txt     a screen with the progress bar mid-run
#   tuning-end.txt     the last screen
#   tuning-raw.log     the raw terminal stream (tmux pipe-pane, or script(1))
#   record.txt         how it was recorded, the exit status, the device
# Records in tmux (a private server: tmux -L); without tmux (or with RECORD_WITH=script), with
# script(1), whose raw stream bench/render_tty.py renders into the screens. RECORD_CMD replaces
# the two tuning runs (a test without a GPU runs a stand-in this way); RECORD_LIMIT_S (default
# 110) bounds the whole recording.
set -uo pipefail
unset TMUX  # a private tmux server, even when run from inside tmux
set_name=${1:-matmul}
out=${OUT:-/tmp/kiln-out}
limit_s=${RECORD_LIMIT_S:-110}
mkdir -p "$out"
repo=$PWD
work=$(mktemp -d /tmp/kiln-record.XXXXXX)
sock="kiln-record-$$"
session=tuning

# Python path as .ci/gpu/gpu_round.sh sets it (wheels for tqdm/psutil/click travel in .whl/).
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  pythonpath=/tmp/site:$repo/src
else
  pythonpath=$repo/src
fi

# The scene the terminal shows: two runs on fresh caches shared between them (the second finds
# the first's result in the tuning database), each after a prompt line.
if [ -n "${RECORD_CMD:-}" ]; then
  cmds=("$RECORD_CMD")
else
  cmds=("python3 bench/record_tuning.py --set $set_name" "python3 bench/record_tuning.py --set $set_name")
fi
{
  printf 'cd %q\n' "$repo"
  printf 'export PYTHONPATH=%q PYTHONUNBUFFERED=1 TERM=xterm-256color\n' "$pythonpath"
  printf 'export KILN_CACHE_DIR=%q KILN_TUNING_DB=%q TRITON_CACHE_DIR=%q\n' \
    "$work/kiln" "$work/kiln/tuning.sqlite3" "$work/triton"
  echo 'unset KILN_PROGRESS  # the bar shows because this is a terminal'
  printf 'while [ ! -e %q ]; do sleep 0.05; done\n' "$work/go"
  for c in "${cmds[@]}"; do
    printf 'printf "%%s\\n" %q\n' "\$ $c"
    printf '%s || { echo $? > %q; exit; }\n' "$c" "$work/rc"
    echo 'echo'
  done
  printf 'echo 0 > %q\n' "$work/rc"
} > "$work/scene.sh"

started=$(date +%s.%N)
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$started" "$(date +%s.%N)"; }

if [ "${RECORD_WITH:-tmux}" = tmux ] && command -v tmux >/dev/null 2>&1; then
  how="tmux $(tmux -V | cut -d' ' -f2), 100x30"
  tmux -L "$sock" -f /dev/null new-session -d -s "$session" -x 100 -y 30 "bash --noprofile --norc '$work/scene.sh'; sleep 600"
  tmux -L "$sock" set-option -t "$session" status off >/dev/null
  tmux -L "$sock" pipe-pane -t "$session" -o "cat >> '$out/tuning-raw.log'"
  : > "$out/tuning-frames.txt"
  touch "$work/go"
  last=""
  bars=0
  deadline=$(( $(date +%s) + limit_s ))
  while :; do
    screen=$(tmux -L "$sock" capture-pane -p -t "$session" 2>/dev/null) || break
    if [ "$screen" != "$last" ]; then
      { printf '=== %s s ===\n' "$(elapsed)"; printf '%s\n' "$screen"; } >> "$out/tuning-frames.txt"
      # screens with a bar still running (kiln's bar reads "tuning NAME: i/n |...")
      if grep -q '^tuning [A-Za-z_0-9]*: ' <<< "$screen"; then
        bars=$((bars + 1))
        printf '%s\n' "$screen" > "$work/bar-$bars.txt"
      fi
      last=$screen
    fi
    [ -e "$work/rc" ] && break
    [ "$(date +%s)" -ge "$deadline" ] && { echo "record_tuning: stopped after $limit_s s" >&2; break; }
    sleep 0.2
  done
  sleep 0.3
  screen=$(tmux -L "$sock" capture-pane -p -t "$session")  # $(...) drops the blank lines below
  printf '%s\n' "$screen" > "$out/tuning-end.txt"
  tmux -L "$sock" kill-server
  # mid-run: the middle one of the screens that showed a running bar
  [ "$bars" -gt 0 ] && cp "$work/bar-$(( (bars + 1) / 2 )).txt" "$out/tuning-mid.txt"
else
  how="script(1), 100x30: the raw stream; screens rendered from it by bench/render_tty.py"
  touch "$work/go"
  timeout "$limit_s" script -q -e -c "stty cols 100 rows 30; bash --noprofile --norc '$work/scene.sh'" "$out/tuning-raw.log" >/dev/null
  # the screens, rendered from the stream: the last one, and one in the middle of the bar's redraws
  python3 bench/render_tty.py "$out/tuning-raw.log" > "$out/tuning-end.txt"
  python3 bench/render_tty.py "$out/tuning-raw.log" --at-middle-of '\rtuning ' > "$out/tuning-mid.txt" \
    || rm -f "$out/tuning-mid.txt"
fi

rc=$(cat "$work/rc" 2>/dev/null || echo "none (did not finish)")
{
  echo "recorded with $how, set $set_name, in $(elapsed) s; exit status of the runs: $rc"
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  git -C "$repo" rev-parse --short HEAD 2>/dev/null
} > "$out/record.txt"
cat "$out/record.txt"
echo "--- last screen ---"
cat "$out/tuning-end.txt"
[ -e "$out/tuning-mid.txt" ] || echo "record_tuning: no mid-run screen with a bar was captured" >&2
rm -rf "$work"
[ "$rc" = 0 ]
