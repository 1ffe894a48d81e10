#!/bin/bash
# One H200 call for wick.compile(mode="reduce-overhead") training (wick's own autodiff with its forward and
# backward replayed as CUDA graphs): the GPU-facing tests, then training rows. First run on 2026-12-05 with other
# tests and a shorter TOTAL (bench/results/2026-12-05-1310-h200/call2.sh): its rows showed the backward not
# replaying ("CUDA graphs:" lines of the host_ab logs), fixed since; rerun it to measure the rows.
#  1. tests/gpu, tests/autodiff (with test_autodiff_cudagraphs.py's CUDA cases), tests/runtime, through
#     tests/gpu/h200_suite.sh (TESTS, SUITE_S=$TEST_S);
#  2. host_ab training rows (bf16 autocast SGD step, the suites' CUDA batch sizes) with eager, inductor, wick,
#     wick-ro: BERT, GPT-2, then LLaMA and T5 while time is left (one process per model, fresh caches).
# From the repository root, `bash tests/gpu/h200_reduce_overhead_training.sh`; carry [".whl"]. TOTAL: seconds for
# the whole call (default 560); TEST_S: pytest's limit (200); TESTS: pytest's arguments.
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
OUT=${OUT:-/tmp/wick-ro-training}
mkdir -p "$OUT"
TOTAL=${TOTAL:-560}
TESTS="${TESTS:-tests/gpu tests/autodiff tests/runtime}" SUITE_S=${TEST_S:-200} OUT=$OUT/suite bash tests/gpu/h200_suite.sh
export PYTHONPATH=/tmp/wick-site
pkill -9 -f "sys.stdin.readline" 2>/dev/null; pkill -9 -f "pytest" 2>/dev/null; sleep 1
ab() {  # name models variants mode
  local left=$(( TOTAL - ($(date +%s) - S0) ))
  [ $left -lt 45 ] && { echo "no time for $1"; return; }
  rm -rf /tmp/ab-caches; mkdir -p /tmp/ab-caches
  TORCHINDUCTOR_CACHE_DIR=/tmp/ab-caches/inductor TRITON_CACHE_DIR=/tmp/ab-caches/triton \
    WICK_CACHE_DIR=/tmp/ab-caches/wick timeout $left python3 bench/host_ab.py $2 $3 $4 > $OUT/ab-$1.log 2>&1
  echo "ab $1 rc $? at $(( $(date +%s) - S0 )) s"; grep -E "first call|FAILED|CUDA graphs:|^\| [^m]" $OUT/ab-$1.log | cut -c1-200
}
for m in huggingface:BertForMaskedLM huggingface:GPT2LMHeadModel huggingface:LlamaForCausalLM \
         huggingface:T5ForConditionalGeneration; do
  ab ${m#*:} $m eager,inductor,wick,wick-ro training
done
echo "== done in $(( $(date +%s) - S0 )) s"
