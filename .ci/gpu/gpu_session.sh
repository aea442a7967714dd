#!/usr/bin/env bash
# One call's worth of GPU work on the device machine, in phases (each with its own time limit),
# logs and JSON under $OUT. Usage, from the repository root on the device:
#   bash .ci/gpu/gpu_session.sh PHASE [PHASE...]
# Phases: native (native-sandbox GPU tests + bench/sandbox_start.py), tests (the GPU suite, Helion
# and native-sandbox files excepted), softmax / matmul (bench/autotune.py --set ...), launch
# (bench/launch.py), liger / fla (bench/realworld.py on Liger's / FLA's ops), before-after (the
# default ops' first calls against kiln at another commit), record-arm (a first call with only
# the program record kept), footprint, helion-split (Helion's
# autotune split by phase, three arms), helion
# (Helion GPU tests + bench/helion_autotune.py), helion-gpu (Helion GPU tests + a spawn-mode
# diagnostic), helion-tests (Helion's GPU tests alone, with room for all of them), helion-part
# (HK=kernels HR=repeats HO=offset HT=tag: one part of a comparison split over several commands,
# joined with --merge), helion-faults, helion-three-faults, demo, suite (every GPU test),
# record (bench/record_tuning.sh), ranks-gpus (node-share GPU tests, two ranks on two GPUs),
# and the later ones documented at their case below (runtime-autotune, inductor-warm, inductor-warm-block, inductor-default,
# inductor-block-1, inductor-block-aa, inductor-families, gla, aoti-diagnose, timeline, realworld-part, realworld-corpus / -mm / -dplr / -gdr
# (the ops not in the default set, four commands), node-share, cli-tune, ray-part-a, ray-install,
# farm, farm-tests). Two at once on a two-GPU machine, one per GPU: .ci/gpu/gpu_pair.sh.
# Wheels the device lacks travel in .whl/ (and scikit-learn in .whl_opt/, installed only if the
# device has none).
set -uo pipefail
out=${OUT:-/tmp/kiln-out}
# the GPU suite's longest files (the suite phase's SUITE_PART)
SLOW_GPU_FILES="tests/test_helion_gpu.py tests/test_inductor_gpu.py tests/test_inductor_choices_gpu.py"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
# (.ci/gpu/gpu_pair.sh installs once for both of its sides and sets GPU_SESSION_INSTALLED=1)
if [ -z "${GPU_SESSION_INSTALLED:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  if ! python3 -c "import sklearn" 2>/dev/null && ls .whl_opt/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl_opt/*.whl
  fi
  # wheels of libraries the benches import, if carried: the newer real-library ops' (FlagGems,
  # torchao, GemLite, rotary-embedding-torch and einops; bench/realworld_ops.py) or the model
  # families' (bench/inductor-models-requirements.txt)
  if ls .whl_libs/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl_libs/*.whl
  fi
fi
export PYTHONPATH=$PWD/src:/tmp/site
# Python bytecode, as a pip installation has it: the image ships none and forbids writing it, so
# every new process (a spawned compile worker, each config's child in Helion's spawn precompile,
# a sandbox) would compile torch from source (~10 s). Kept under /tmp/bench-pycache, filled once
# per machine before the first phase; every bench records it (bench/machine_state.py bytecode).
# GPU_SESSION_BYTECODE=0 runs without, as the runs made before it did.
if [ "${GPU_SESSION_BYTECODE:-1}" != 0 ]; then
  export BENCH_BYTECODE_CACHE=${BENCH_BYTECODE_CACHE:-/tmp/bench-pycache}
  export PYTHONPYCACHEPREFIX=$BENCH_BYTECODE_CACHE
  unset PYTHONDONTWRITEBYTECODE
  if [ ! -e "$BENCH_BYTECODE_CACHE/.filled" ]; then
    filled_at=$SECONDS
    # (the -j 0 compile uses every core; a file of another Python's syntax is skipped)
    timeout 300 python3 -m compileall -qq -j 0 \
      $(python3 -c 'import site, sysconfig; print(sysconfig.get_path("stdlib"), *site.getsitepackages())') \
      /tmp/site "$PWD/src" "$PWD/bench" >/dev/null 2>&1
    mkdir -p "$BENCH_BYTECODE_CACHE" && touch "$BENCH_BYTECODE_CACHE/.filled"
    echo "bytecode cache $BENCH_BYTECODE_CACHE filled in $((SECONDS - filled_at)) s" | tee -a "$out/device.txt"
  fi
else
  echo "no bytecode cache (GPU_SESSION_BYTECODE=0)" | tee -a "$out/device.txt"
fi
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
} 2>&1 | tee -a "$out/device.txt"

run() {  # run NAME SECONDS CMD...: a phase step with a limit, output to $out/NAME.log, tail shown
  local name=$1 limit=$2
  shift 2
  local started=$SECONDS
  timeout -k 10 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc in $((SECONDS - started)) s"
  tail -n "${TAIL:-6}" "$out/$name.log"
}

helion_bench() {  # helion_bench NAME SKIP KERNELS: one bench/helion_autotune.py run (HR, HO, HB as above;
  # HA: the arms, the bench's default when unset; HC: the commit the copied tree is, which it
  # cannot read without .git; HM: the bench's --min-start-s; HRT: its --run-timeout-s, which a
  # spawn run of layer_norm at effort quick on an H100 can pass at the default 240 s; HE, HG: the
  # effort and generation cap, quick and 1 unless set, a merge keeping other settings' rows apart)
  TAIL=24 run "$1" 590 python3 bench/helion_autotune.py --skip "$2" --kernels "$3" --repeats "${HR:-1}" \
    --repeat-offset "${HO:-0}" --budget-s "${HB:-570}" ${HA:+--arms "$HA"} ${HC:+--commit "$HC"} ${HM:+--min-start-s "$HM"} \
    ${HRT:+--run-timeout-s "$HRT"} ${HE:+--effort "$HE"} ${HG:+--generations "$HG"} \
    --out "$out/$1.json"
}

for phase in "$@"; do
  case $phase in
    native)
      run native-tests 150 python3 -m pytest -q -s -p no:cacheprovider tests/test_native_sandbox_gpu.py
      run sandbox-start 120 python3 bench/sandbox_start.py --json "$out/sandbox_start.json" ;;
    tests)
      TAIL=12 run gpu-tests 380 python3 -m pytest -q -m gpu -p no:cacheprovider tests/ \
        --ignore=tests/test_helion_gpu.py --ignore=tests/test_native_sandbox_gpu.py ;;
    softmax)
      TAIL=4 run autotune-softmax 150 python3 bench/autotune.py --set softmax --json "$out/autotune-softmax.json" ;;
    matmul)
      TAIL=4 run autotune-matmul 300 python3 bench/autotune.py --set matmul --json "$out/autotune-matmul.json" ;;
    launch)
      TAIL=16 run launch 200 python3 bench/launch.py --json "$out/launch.json" ;;
    liger)
      TAIL=12 run realworld-liger 560 python3 bench/realworld.py --ops liger_dyt_fwdbwd,liger_swiglu_fwd,liger_moe_fwd \
        --out "$out/realworld-liger.json" ;;
    fla)
      TAIL=12 run realworld-fla 560 python3 bench/realworld.py --ops fla_chunk_gla_fwd,fla_parallel_simple_gla_fwd \
        --out "$out/realworld-fla.json" ;;
    helion)
      run helion-tests 200 python3 -m pytest -q -p no:cacheprovider tests/test_helion_gpu.py
      TAIL=20 run helion-bench 480 python3 bench/helion_autotune.py --out "$out/helion.json" ;;
    conformance)
      TAIL=4 run conformance 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_autotune_conformance.py \
        tests/test_launch_gpu.py ;;
    helion-bench)
      TAIL=24 run helion-bench 400 python3 bench/helion_autotune.py --budget-s 300 --out "$out/helion.json" ;;
    conventions)
      TAIL=20 run conventions 200 python3 bench/launch.py --conventions-only --json "$out/launch-conventions.json" ;;
    realworld-fix)
      TAIL=10 run realworld-fix 420 python3 bench/realworld.py \
        --ops liger_dyt_fwdbwd,liger_swiglu_fwd,fla_parallel_simple_gla_fwd --out "$out/realworld-fix.json" ;;
    checkgpu)
      TAIL=6 run checkgpu 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_output_rule_gpu.py \
        tests/test_output_rule.py tests/test_autotune_gpu.py tests/test_native_sandbox_gpu.py tests/test_bundle_gpu.py ;;
    dyt)
      TAIL=8 run realworld-dyt 200 python3 bench/realworld.py --ops liger_dyt_fwdbwd --out "$out/realworld-dyt.json" ;;
    helion-compare)
      TAIL=30 run helion-compare 250 python3 bench/helion_autotune.py --skip fault,ctrl-c --kernels add,softmax \
        --budget-s 200 --out "$out/helion-compare.json" ;;
    final)
      TAIL=14 run gpu-tests-final 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/ \
        --ignore=tests/test_helion_gpu.py
      TAIL=14 run launch-final 60 python3 bench/launch.py --batches 15 --json "$out/launch-final.json" ;;
    helion-tests)  # Helion's GPU tests alone (6 passed in 354 s on an H100 without bytecode kept)
      TAIL=12 run helion-tests 560 python3 -m pytest -q -p no:cacheprovider -rfEs --durations=10 \
        tests/test_helion_gpu.py ;;
    helion-gpu)  # Helion's GPU tests, then Helion's own spawn precompile with its debug log
      run helion-tests 240 python3 -m pytest -q -p no:cacheprovider tests/test_helion_gpu.py
      TAIL=12 run helion-spawn 130 env HELION_AUTOTUNE_LOG_LEVEL=DEBUG python3 bench/helion_autotune.py \
        --child --arm spawn --kernel softmax --effort quick --generations 1 --seed 1234 ;;
    helion-part)  # one part of a split comparison: HK kernels, HR repeats, HO repeat offset, HT tag,
      # HA arms (e.g. fork,spawn,kiln; at effort quick on an H100 fork ran 54-76 s a kernel and
      # kiln 29-35 s, spawn ~2x fork; fork,kiln-race,kiln-screen over two kernels: 324-337 s)
      helion_bench "helion-$HT" fault,ctrl-c "$HK" ;;
    helion-faults)  # the fault and Ctrl-C arms, then (HK set) a comparison part as in helion-part
      if [ -n "${HK:-}" ]; then helion_bench helion-faults none "$HK"; else helion_bench helion-faults compare add; fi ;;
    helion-three-faults)  # only the three faults (abort, illegal memory access, hang) in one
      # autotune, per arm (kiln, fork, spawn; HA picks some)
      helion_bench helion-three-faults compare,abort,ctrl-c add ;;
    helion-inprocess)  # one config aborting with Helion's precompile off (compiles in-process)
      TAIL=8 run helion-inprocess 120 python3 bench/helion_autotune.py --child --arm none --kernel crashy_add \
        --faults --seed-abort --effort quick --generations 1 --seed 1234 ;;
    demo)
      run demo 120 python3 -m triton_kiln demo --workers 16 ;;
    suite)  # every GPU-marked test (Helion's, the native sandbox's and the wheel's included) over 8
      # processes, file by file; one line per test as it ends (-v), so a run stopped at its limit
      # still names its failures; then the failures again, one process, where the GPU is not shared
      # (a test that times configs or counts GPU processes can fail beside others). Serially the
      # suite outgrows one command's 10 minutes; over 8 processes it overran 490 s on an H100.
      python3 -c "import setuptools, wheel; print('setuptools', setuptools.__version__)" 2>&1 | tee -a "$out/device.txt"
      # (each failure's report is in gpu-failures.log as it happens, so a stopped run says why)
      # Over 8 processes a file runs in one of them, so the longest files (Helion's and
      # Inductor's, minutes each) outlast the rest and the whole overruns one command: SUITE_PART
      # splits it in two commands of under 10 minutes, "slow" (those files, each test in any
      # process) and "rest" (every other file); unset, the whole suite.
      targets=(tests/)
      spread=loadfile
      case ${SUITE_PART:-} in
        slow) targets=($SLOW_GPU_FILES); spread=load ;;
        rest) for f in $SLOW_GPU_FILES; do targets+=("--ignore=$f"); done ;;
      esac
      KILN_TEST_FAILURE_LOG="$out/gpu-failures.log" TAIL=8 run gpu-suite "${SUITE_S:-500}" \
        python3 -m pytest -v -m gpu -n 8 --dist "$spread" -p no:randomly \
        -p no:cacheprovider -rfEs --durations=30 "${targets[@]}"
      failed=$(grep -E "^(FAILED|ERROR) tests/|\[gw[0-9]+\] .* (FAILED|ERROR) tests/" "$out/gpu-suite.log" \
        | grep -oE "tests/[^ ]+::[^ ]+" | sort -u)
      echo "failed in parallel: $(echo "$failed" | grep -c tests/)"
      if [ -n "$failed" ]; then
        # shellcheck disable=SC2086
        KILN_TEST_FAILURE_LOG="$out/gpu-failures-rerun.log" TAIL=25 run gpu-suite-rerun "${RERUN_S:-70}" \
          python3 -m pytest -q -p no:cacheprovider -rfEs $failed
      fi ;;
    suite-inductor)  # the suite in two halves, one per GPU: .ci/gpu/gpu_pair.sh suite-inductor suite-rest
      TAIL=6 run gpu-suite-inductor 560 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        tests/test_inductor_gpu.py tests/test_inductor.py ;;
    suite-rest)  # every other GPU-marked test (the half beside suite-inductor)
      TAIL=25 run gpu-suite-rest 560 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ \
        --ignore=tests/test_inductor_gpu.py --ignore=tests/test_inductor.py ;;
    before-after)  # first calls of the default ops against kiln at another commit: BASE_SRC (its src/,
      # carried: git archive COMMIT src | tar -x -C .kiln-base/NAME), BASE_COMMIT, BA_ROUNDS rounds
      # (medians; 1 by default); ~260 s a round on an H100 (BA_OPS: a subset of the ops)
      TAIL=10 run before-after "${BA_S:-420}" python3 bench/realworld.py --arms kiln_baseline,kiln \
        --rounds "${BA_ROUNDS:-1}" ${BA_OPS:+--ops "$BA_OPS"} \
        --baseline-src "$BASE_SRC" --baseline-commit "$BASE_COMMIT" --arm-timeout 120 \
        --out "$out/before-after.json" --md "$out/before-after.md" ;;
    record-arm)  # RO ops' (liger_moe_fwd) first call on fresh caches holding only the kiln arm's program
      # record, against the kiln arm (~70 s for the MoE)
      TAIL=8 run record-arm 300 python3 bench/realworld.py --ops "${RO:-liger_moe_fwd}" --arms kiln,kiln_record ${HC:+--commit "$HC"} \
        --out "$out/record-arm.json" --md "$out/record-arm.md" ;;
    runtime-autotune)  # the sandboxed runtime autotune on a GPU: its test, then its fault case (stock
      # against kiln's sandbox); ~100 s on an H100, estimated, not measured
      TAIL=6 run runtime-autotune-test 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        tests/test_inductor_runtime_autotune.py
      TAIL=6 run runtime-autotune-faults 150 python3 bench/inductor_faults.py --cases runtime_autotune_ima \
        --out "$out/inductor-faults-runtime.json" ;;
    footprint)  # what kiln holds where nothing tunes, after an idle time, right after a tuning, and
      # on a fresh cache before any call (364 s on an H100 with 5 s fresh arms; ~420 s with their 30 s)
      TAIL=14 run footprint 480 python3 bench/footprint.py --out "$out/footprint.json" ;;
    helion-split)  # Helion's autotune wall split by phase, HA arms (fork,spawn,kiln): HK kernels
      # (matmul,layer_norm), HE effort (quick), HG generations (1); 50-95 s per arm and kernel at
      # quick on an H100 (spawn slower), 478 s for fork,kiln,kiln-race over matmul and layer_norm
      TAIL=30 run helion-split 590 python3 bench/helion_autotune.py --skip fault,ctrl-c \
        --kernels "${HK:-matmul,layer_norm}" --effort "${HE:-quick}" --generations "${HG:-1}" --repeats 1 \
        --arms "${HA:-fork,spawn,kiln}" --budget-s 570 --min-start-s 110 --run-timeout-s 200 \
        --out "$out/helion-split-${HT:-a}.json" ;;
    record)  # a tuning run as a user sees it (tmux, or script(1)): docs/tuning-recording.txt
      TAIL=40 run record 130 bash bench/record_tuning.sh matmul ;;
    devcheck)  # the output check on the GPU, the sandbox and the autotuner's GPU tests
      TAIL=12 run devcheck 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_device_check_gpu.py \
        tests/test_native_sandbox_gpu.py tests/test_output_rule_gpu.py tests/test_output_rule.py \
        tests/test_autotune_gpu.py ;;
    checkcost)
      TAIL=12 run checkcost 90 python3 bench/output_check_cost.py --mb 128 --json "$out/output_check_cost-128mb.json" ;;
    autotune-all)
      TAIL=12 run autotune-all 300 python3 bench/autotune.py --set all --json "$out/autotune-all.json" ;;
    rw-a)  # the larger sizes: DyT 16384x4096 and SwiGLU
      TAIL=14 run rw-a 400 python3 bench/realworld.py --ops liger_dyt_fwdbwd_16384x4096,liger_swiglu_fwd --out "$out/rw-a.json" \
        --md "$out/rw-a.md" ;;
    rw-b)
      TAIL=14 run rw-b 400 python3 bench/realworld.py --ops liger_moe_fwd --out "$out/rw-b.json" --md "$out/rw-b.md" ;;
    rw-c)
      TAIL=14 run rw-c 400 python3 bench/realworld.py --ops fla_chunk_gla_fwd --out "$out/rw-c.json" --md "$out/rw-c.md" ;;
    inductor-tests)  # kiln.inductor on torch 2.11: the GPU tests (~6 min)
      TAIL=14 run inductor-tests 560 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_inductor_gpu.py ;;
    inductor-cpu-tests)  # kiln.inductor's CPU tests on torch 2.11, the sidecar's among them (~4 min)
      TAIL=14 run inductor-cpu-tests 480 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_inductor.py \
        tests/test_inductor_faults.py tests/test_inductor_sidecar.py ;;
    inductor-smoke)
      TAIL=20 run inductor-smoke 200 python3 bench/inductor.py --smoke --out "$out/inductor-smoke.json" ;;
    inductor-block)
      TAIL=20 run inductor-block 560 python3 bench/inductor.py --model block --mode all --runs 1 \
        --out "$out/inductor-block.json" ;;
    ranks)  # 8 processes on one GPU tuning the 72-config matmul, kiln and triton.autotune
      TAIL=20 run ranks 450 python3 bench/ranks.py --processes 8 --out "$out/ranks.json"
      TAIL=8 run node-gpu 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_node_tuning.py ;;
    ranks-gpus)  # the node-share GPU tests (1 GPU: no split; >= 2: split), then two
      # ranks on two GPUs tuning Liger's MoE vs one alone (a skip row with fewer than two GPUs)
      TAIL=8 run node-share-gpu 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        tests/test_node_share.py tests/test_node_tuning.py
      TAIL=20 run ranks-gpus 560 python3 bench/ranks.py --op liger_moe_fwd --gpus 2 --arms kiln,triton \
        --out "$out/ranks-gpus.json" ;;
    ray-part-a)  # Ray's wheel is larger than one carry: its first part waits in /tmp for ray-install
      mkdir -p /tmp/raywhl && cp .whl_ray_a/* /tmp/raywhl/ && ls -la /tmp/raywhl ;;
    ray-install)  # the second part, the wheel checked, Ray and its missing dependencies into /tmp/site
      cp .whl_ray_b/* /tmp/raywhl/ && (cd /tmp/raywhl && cat ray.part.* > ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl \
        && sha256sum -c ray.sha256) && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target /tmp/raysite /tmp/raywhl/*.whl && PYTHONPATH=/tmp/raysite:$PYTHONPATH python3 -c "import ray; print('ray', ray.__version__)" \
        && ls /tmp/raysite/bin | head -5 ;;
    farm)  # the 72-config set on a local Ray cluster against the local pool, 16 cores
      TAIL=30 run farm 420 env PATH="/tmp/raysite/bin:$PATH" PYTHONPATH="/tmp/raysite:$PYTHONPATH" python3 bench/farm.py --cores 16 --runs 3 --arms local,ray,ray_settled,ray_standing --json "$out/farm.json" ;;
    inductor-warm)  # warm processes, stock / kiln / kiln's pool at install (kiln_eager) / stock beside kiln's pool
      TAIL=16 run inductor-warm 580 python3 bench/inductor_warm.py --model resnet50 --mode default \
        --rounds "${IW_ROUNDS:-2}" --warm-repeats "${IW_REPEATS:-3}" --first-round "${IW_FIRST:-0}" \
        --out "$out/inductor-warm-${IW_FIRST:-0}.json" ;;
    inductor-warm-block)  # the block's warm processes in max-autotune, stock against kiln (~5 min at 4 sweeps)
      TAIL=16 run inductor-warm-block 540 python3 bench/inductor_warm.py --model block --mode max-autotune-no-cudagraphs \
        --arms stock,kiln --rounds 1 --warm-repeats "${IW_REPEATS:-4}" --first-round "${IW_FIRST:-0}" \
        --out "$out/inductor-warm-block-${IW_FIRST:-0}.json" ;;
    inductor-default)  # default mode, ID_RUNS runs (2: ~7 min) from run ID_FIRST (0) of ID_MODEL (resnet50),
      # each with the paired runtime (both arms' blocks on one core, in turn)
      TAIL=8 run inductor-default 570 python3 bench/inductor.py --model "${ID_MODEL:-resnet50}" --mode default \
        --runs "${ID_RUNS:-2}" --first-run "${ID_FIRST:-0}" \
        --out "$out/inductor-default-${ID_MODEL:-resnet50}-${ID_FIRST:-0}.json" ;;
    inductor-ma-cold)  # ResNet-50 max-autotune, one run, cold processes only (~7 min: stock ~290 s); IM_RUN=K
      TAIL=6 run inductor-ma-cold 590 python3 bench/inductor.py --model resnet50 --mode max-autotune-no-cudagraphs \
        --runs 1 --first-run "${IM_RUN:-0}" --no-warm --iters 20 --blocks 5 --paired-rounds "${IM_PAIRED:-200}" \
        --paired-block-iters "${IM_BLOCK_ITERS:-10}" \
        --out "$out/inductor-ma-${IM_RUN:-0}.json" ;;
    inductor-ma-aa-1)  # the A/A control of inductor-ma-cold, part 1: stock's cold process, kept in /tmp/aa (~5 min)
      TAIL=6 run inductor-ma-aa-1 590 python3 bench/inductor.py --model resnet50 --mode max-autotune-no-cudagraphs \
        --arms stock --runs 1 --first-run "${IM_RUN:-0}" --no-warm --iters 20 --blocks 5 --work-dir /tmp/aa \
        --out "$out/inductor-ma-aa-1-${IM_RUN:-0}.json" ;;
    inductor-ma-aa-2)  # part 2, on the same machine right after part 1: a second stock process (--aa), paired with it
      TAIL=6 run inductor-ma-aa-2 590 python3 bench/inductor.py --model resnet50 --mode max-autotune-no-cudagraphs \
        --aa --arms kiln --pair-with-kept --work-dir /tmp/aa --runs 1 --first-run "${IM_RUN:-0}" --no-warm \
        --iters 20 --blocks 5 --paired-rounds "${IM_PAIRED:-200}" --paired-block-iters "${IM_BLOCK_ITERS:-10}" \
        --out "$out/inductor-ma-aa-${IM_RUN:-0}.json" ;;
    inductor-block-1)  # the block in max-autotune, one run, cold and warm (~4 min); IB_RUN=K
      TAIL=6 run inductor-block-1 400 python3 bench/inductor.py --model block --mode max-autotune-no-cudagraphs \
        --runs 1 --first-run "${IB_RUN:-0}" --work-dir /tmp/ib --out "$out/inductor-block-${IB_RUN:-0}.json" ;;
    inductor-block-aa)  # the A/A control of inductor-block-1 (the "kiln" arm runs stock Inductor), ~4 min; IB_RUN=K
      TAIL=6 run inductor-block-aa 400 python3 bench/inductor.py --model block --mode max-autotune-no-cudagraphs --aa \
        --runs 1 --first-run "${IB_RUN:-0}" --work-dir /tmp/ib-aa --out "$out/inductor-block-aa-${IB_RUN:-0}.json" ;;
    inductor-families)  # the model families in max-autotune-no-cudagraphs: causal_lm (transformers' Llama,
      # TinyLlama-1.1B's shapes, 4 layers) and vit (timm's ViT-B/16), one run each (IF_RUN: its index, 0),
      # both arms' cold and warm processes and the paired runtime; IF_MODELS: a subset ("causal_lm vit").
      # Needs the wheels of bench/inductor-models-requirements.txt in .whl_libs/ (bench/README.md).
      # Time, an ESTIMATE, not measured: from ResNet-50's H100 max-autotune figures
      # (bench/results/inductor-h100.json: 24 template autotunes, stock cold 293 s, kiln 86 s, so ~11 s
      # and ~3 s an autotune beside ~20 s of other compile work), the LM's 5 distinct GEMM shapes and the
      # ViT's 6 (5 GEMMs, the patch convolution) give ~75-90 s stock cold and ~30-40 s kiln cold a model;
      # with the warm and paired processes and ~20 s of start-up and measurement a process, ~250 s a
      # model, ~500 s both. Each model's step gets its share of 560 s; one that reaches its limit writes
      # no row: then run one model a call (IF_MODELS=causal_lm, then IF_MODELS=vit).
      TAIL=4 run families-import 30 python3 -c "import transformers, timm, torchvision; \
from transformers import LlamaForCausalLM; \
print('transformers', transformers.__version__, transformers.__file__); print('timm', timm.__version__, timm.__file__)"
      models=${IF_MODELS:-causal_lm vit}
      each=$((560 / $(wc -w <<<"$models")))
      for model in $models; do
        TAIL=8 run "inductor-$model" "$each" python3 bench/inductor.py --model "$model" \
          --mode max-autotune-no-cudagraphs --runs 1 --first-run "${IF_RUN:-0}" --iters 20 --blocks 5 \
          --work-dir /tmp/families --out "$out/inductor-$model-${IF_RUN:-0}.json"
      done ;;
    choice-probe)  # max-autotune's picks and timings per template autotune, and the compiled part-model,
      # stock against kiln and each against itself (PL stages, PA arms; ~40 s an arm at PL=1)
      TAIL=60 run choice-probe 580 python3 bench/inductor_choice_probe.py --layers "${PL:-1}" \
        --arms "${PA:-stock,kiln,stock,kiln,kiln+noquiet}" --out "$out/choice-probe-${PL:-1}.json" ;;
    aoti-diagnose)  # where stock AOTInductor, kiln not installed, dies on this machine (SIGSEGV in
      # aoti_load_package on the H100 image): the control's Python stack (faulthandler), then a
      # native backtrace where gdb is installed (~60-120 s, estimated)
      TAIL=40 run aoti-control 200 env PYTHONPATH="$PWD/tests:$PYTHONPATH" python3 -X faulthandler \
        -m support.aoti_control /tmp/aoti-control
      if command -v gdb >/dev/null; then
        TAIL=60 run aoti-gdb 240 env PYTHONPATH="$PWD/tests:$PYTHONPATH" gdb -q -batch -ex run -ex bt \
          --args python3 -m support.aoti_control /tmp/aoti-gdb
      else
        echo "no gdb on this machine: the faulthandler stack above is all"
      fi ;;
    timeline)  # where a kiln arm's first call of TL_OP (liger_dyt_fwdbwd) spends its wall, the
      # sandbox's start and first wait included (bench/first_call_timeline.py)
      TAIL=30 run timeline 200 python3 bench/first_call_timeline.py --op "${TL_OP:-liger_dyt_fwdbwd}" \
        --out "$out/timeline" ;;
    realworld-part)  # any ops (RW_OPS, required), the four arms a complete row needs unless RW_ARMS
      # says otherwise, each arm within RW_ARM_S (240 s), one command of <= 590 s named RW_TAG, HC
      # the commit as for helion_bench; join the parts with bench/realworld.py --merge. Estimated
      # with bytecode kept (not measured): an arm's process ~8 s beside its first call, the
      # harness ~15 s an op; e.g. the two DyT ops, SwiGLU and simple GLA ~320 s; MoE and chunk GLA
      # ~400 s; DPLR alone ~280 s
      TAIL=14 run "realworld-${RW_TAG:-part}" 590 python3 bench/realworld.py --ops "$RW_OPS" \
        --arms "${RW_ARMS:-triton,triton_parallel,kiln,harness}" --arm-timeout "${RW_ARM_S:-240}" ${HC:+--commit "$HC"} \
        --out "$out/realworld-${RW_TAG:-part}.json" --md "$out/realworld-${RW_TAG:-part}.md" ;;
    realworld-corpus*)  # the ops not in the default set, the four arms a complete row needs, in
      # four commands of <= 590 s (budgets estimated in bench/realworld.py's docstring); join the
      # JSON with bench/realworld.py --merge. RC_OPS overrides the ops of realworld-corpus.
      arms=triton,triton_parallel,kiln,harness
      case $phase in
        realworld-corpus) ops=${RC_OPS:-rotary_flash_attn_fwdbwd,gemlite_a16w8_gemm} arm_s=240 ;;
        realworld-corpus-mm) ops=flaggems_mm_lmhead,torchao_scaled_int8_mm arm_s=240 ;;
        realworld-corpus-dplr) ops=fla_chunk_dplr_fwd arm_s=330 ;;
        realworld-corpus-gdr) ops=fla_chunk_gdr_fwd arm_s=240 ;;
        *) echo "unknown phase $phase"; continue ;;
      esac
      TAIL=14 run "$phase" 590 python3 bench/realworld.py --ops "$ops" --arms "$arms" --arm-timeout "$arm_s" \
        --out "$out/$phase.json" --md "$out/$phase.md" ;;
    gla)  # FLA chunk_gla with the per-kernel choice harness (~200 s)
      TAIL=8 run gla 400 python3 bench/realworld.py --ops fla_chunk_gla_fwd --arms triton,kiln,harness \
        --out "$out/realworld-gla.json" --md "$out/realworld-gla.md" ;;
    node-share)  # tuning shared across GPUs (with one GPU: no split, the same choice)
      TAIL=8 run node-share 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_node_share.py \
        tests/test_node_tuning.py ;;
    cli-tune)  # kiln tune on this GPU (report, --bundle run with Triton's compiler blocked)
      TAIL=8 run cli-tune 300 python3 -m pytest -q -p no:cacheprovider -rfEsxX tests/test_cli_tune_gpu.py \
        tests/test_cli_tune.py ;;
    farm-tests)  # the farm's tests on a real local Ray cluster (2 CPUs of its own), on this machine's Python
      TAIL=12 run farm-tests 420 env PATH="/tmp/raysite/bin:$PATH" PYTHONPATH="/tmp/raysite:$PYTHONPATH" python3 -m pytest -q \
        -p no:cacheprovider -rfEs tests/test_farm.py tests/test_farm_ray.py ;;
    *) echo "unknown phase $phase" ;;
  esac
done
