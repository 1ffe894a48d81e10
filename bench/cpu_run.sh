#!/usr/bin/env bash
# CPU benchmarks on a quiet many-core host (the H200 machine of the device tool,
# whose CPU side is otherwise idle), each part pinned to its own two cores so the
# figures compare with the 2-core development box but without its neighbours:
#
#   bash bench/cpu_run.sh
#
# 1. builds wick with the host's own python and torch;
# 2. bench/memory_bound_kernels.py alone on cores 0-1 (2 threads): copy and clone bandwidth,
#    eager / inductor / wick kernels;
# 3. wick-bench on the huggingface models, eager / inductor / dynamo+wick,
#    inference on cores 2-3 and training on cores 4-5 at the same time (2 threads
#    each; every row is its own process, as on the development box).
# Writes into $OUT (default bench/results/<date>-cpu2-quiet): build.log,
# kernels/{results.json,report.md}, inference/ and training/ {results.json,report.md}.
# Knobs: PY (python3), MODELS, REPEATS (5), TOTAL_S (560).
set -u
START=$(date +%s)
PY=${PY:-python3}
OUT=${OUT:-$PWD/bench/results/$(date +%Y-%m-%d-%H%M)-cpu2-quiet}
MODELS=${MODELS:-BertForMaskedLM,GPT2LMHeadModel,DistilBertForMaskedLM,LlamaForCausalLM}
REPEATS=${REPEATS:-5}
TOTAL_S=${TOTAL_S:-560}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
mkdir -p "$OUT/kernels" "$OUT/inference" "$OUT/training"
left() { echo $(( TOTAL_S - ($(date +%s) - START) )); }
{
  echo "== $(date -u) $(nproc) cores; $(lscpu | grep 'Model name' | sed 's/  */ /g')"
  "$PY" -c "import sys, torch; print(sys.version.split()[0], 'torch', torch.__version__)"
  cc --version 2>&1 | head -1
  rm -f wick/_C*.so
  timeout 300 "$PY" setup.py -q build_ext --inplace --force --parallel "$(nproc)"
  echo "build exit code $?"
} > "$OUT/build.log" 2>&1
tail -3 "$OUT/build.log"
echo "== kernels ($(left) s left)"
timeout 200 taskset -c 0,1 "$PY" bench/memory_bound_kernels.py --repeats "$REPEATS" --out "$OUT/kernels" 2>&1 | tail -12
B=$(( $(left) - 20 ))
echo "== models, budget $B s"
for mode in inference training; do
  cores=$([ $mode = inference ] && echo 2,3 || echo 4,5)
  taskset -c $cores timeout $(( B + 15 )) "$PY" wick/bench/__main__.py --suites huggingface --device cpu \
    --compilers eager,inductor,dynamo+wick --modes $mode --models "$MODELS" --threads 2 \
    --repeats "$REPEATS" --budget "$B" --quiet --no-plots --out "$OUT/$mode" > "$OUT/$mode.log" 2>&1 &
done
wait
for mode in inference training; do
  grep -A12 '^## Summary' "$OUT/$mode/report.md" 2>/dev/null | head -10 || tail -20 "$OUT/$mode.log"
  grep -v '^\[' "$OUT/$mode.log" | tail -5; rm -f "$OUT/$mode.log"  # the device returns at most 8 files
done
echo "== done in $(( $(date +%s) - START )) s"
