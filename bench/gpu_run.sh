#!/usr/bin/env bash
# wick on an NVIDIA GPU (the H200 machine of the device tool), from the repository root:
#
#   bash bench/gpu_run.sh [CHUNK]          CHUNK = i/n of the model list (default 1/10:
#                                          28 models; 1/10 .. 10/10 cover them all, ~3 models each)
#
# Builds wick with this machine's own python and torch (nothing is fetched), then
# runs `wick-bench` on cuda with every compiler and pair (inductor, wick, wick-ro,
# wick+inductor, dynamo+wick), each row in its own process with a time limit,
# inside a total budget (TOTAL_S, default 540 s), so one call fits the 10-minute
# limit. Rows not started within the budget are listed as "skipped", never dropped.
#
# Writes into $OUT (default bench/results/gpu-<date>), at most 8 files, 2 levels:
#   build.log run.log results.json report.md speedup.png compile_time.png
#   micro/results.json micro/report.md        (only with MICRO=1)
#
# Knobs (environment): SUITES (micro,huggingface,timm,torchvision), MODELS (names),
#   MODES (inference,training), PRECISIONS (float32; bf16 or fp16 = autocast),
#   COMPILERS (default: the harness's CUDA list), ROW_TIMEOUT (150), TOTAL_S (540),
#   REPEATS (10), MICRO (0; 1 also runs bench/micro.py on cuda first), PY (python3),
#   WICK_GIT_REV (recorded in the results; there is no .git on that machine), DEVICE (cuda).
set -u
START=$(date +%s)
CHUNK=${1:-${CHUNK:-1/10}}
PY=${PY:-python3}
OUT=${OUT:-$PWD/bench/results/gpu-$(date +%Y-%m-%d-%H%M)}
SUITES=${SUITES:-micro,huggingface,timm,torchvision}
MODES=${MODES:-inference,training}
PRECISIONS=${PRECISIONS:-float32}
ROW_TIMEOUT=${ROW_TIMEOUT:-150}
TOTAL_S=${TOTAL_S:-540}
REPEATS=${REPEATS:-10}
MICRO=${MICRO:-0}
DEVICE=${DEVICE:-cuda}   # cpu only to try this script on a machine without a GPU
export PYTHONUNBUFFERED=1
# Single GPU, but keep NVLink multicast off wherever a program starts (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p "$OUT"

left() { echo $(( TOTAL_S - ($(date +%s) - START) )); }

{
  echo "== $(date -u) chunk $CHUNK suites $SUITES modes $MODES precisions $PRECISIONS"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  "$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'gpu', torch.cuda.is_available())"
  cc --version 2>&1 | head -1
  echo "== build (python setup.py build_ext --inplace)"
  rm -f wick/_C*.so
  timeout 300 "$PY" setup.py -q build_ext --inplace --force --parallel "$(nproc)"
  echo "build exit code $?"
  "$PY" -c "import wick, torch; print('wick imports:', wick.__file__); print('torch.compile backend wick registered:', 'wick' in torch._dynamo.list_backends())" 2>&1 | tail -3
} > "$OUT/build.log" 2>&1
tail -4 "$OUT/build.log"

if [ "$MICRO" = "1" ] && [ "$(left)" -gt 240 ]; then
  echo "== micro ($(left) s left)"
  timeout 180 "$PY" bench/micro.py --device "$DEVICE" --out "$OUT/micro" > "$OUT/micro.log" 2>&1
  echo "micro exit code $?"; tail -25 "$OUT/micro.log"; rm -f "$OUT/micro.log"
fi

BUDGET=$(( $(left) - 25 ))
echo "== wick-bench: chunk $CHUNK, budget $BUDGET s"
ARGS=(--device "$DEVICE" --suites "$SUITES" --modes "$MODES" --precisions "$PRECISIONS" --chunk "$CHUNK"
      --timeout "$ROW_TIMEOUT" --budget "$BUDGET" --repeats "$REPEATS" --out "$OUT")
[ -n "${MODELS:-}" ] && ARGS+=(--models "$MODELS")
[ -n "${COMPILERS:-}" ] && ARGS+=(--compilers "$COMPILERS")
# Run by path: the harness works (and says so in its rows) even if wick did not build.
timeout $(( BUDGET + 60 )) "$PY" wick/bench/__main__.py "${ARGS[@]}" > "$OUT/run.log" 2>&1
echo "wick-bench exit code $?"
cat "$OUT/run.log" | grep -v '^\[' | tail -80
echo "== done in $(( $(date +%s) - START )) s; files in $OUT:"; ls -la "$OUT"
