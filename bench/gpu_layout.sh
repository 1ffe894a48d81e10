#!/bin/bash
# One device call for issue 9's layout work (helper gpu9): build, wick-bench rows,
# the GPU tests, then bench/layout_check.py. Knobs: MODELS, COMPILERS, TOTAL_S,
# TESTS_S (GPU tests' limit, 0 skips them), CHECK_S, CHECK_TIMM (timm models for
# layout_check), TESTS (test files), ROW_TIMEOUT.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
S0=$(date +%s)
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
echo "== bench at $(( $(date +%s) - S0 )) s"
if [ -n "${MODELS:-}" ]; then
  # the wick-bench rows as bench/gpu_run.sh runs them, without its second build
  mkdir -p $OUT/bench
  timeout $(( ${TOTAL_S:-150} + 40 )) python3 wick/bench/__main__.py --device cuda --suites ${SUITES:-timm} \
    --modes inference --precisions bf16 --chunk 1/1 --timeout ${ROW_TIMEOUT:-80} --budget ${TOTAL_S:-150} \
    --repeats ${REPEATS:-10} --no-plots --out $OUT/bench --models "$MODELS" --compilers "${COMPILERS:-dynamo+wick}" \
    > $OUT/bench/run.log 2>&1
  echo "wick-bench exit $?"
  grep "^| " $OUT/bench/report.md | cut -d'|' -f2-13,17 | cut -c1-260 | tail -n +3
fi
echo "== tests at $(( $(date +%s) - S0 )) s"
if [ "${TESTS_S:-60}" != 0 ]; then
  timeout ${TESTS_S:-60} python3 -m pytest ${TESTS:-tests/gpu/test_channels_last_gpu.py tests/gpu/test_triton_gpu.py} -p no:cacheprovider -p no:warnings -q -x 2>&1 | tail -c 20000 > $OUT/tests.log
  grep -E "passed|failed|error" $OUT/tests.log | tail -3; grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head
fi
WICK_LOG=graphs,perf timeout ${CHECK_S:-45} python3 bench/layout_check.py ${CHECK_TIMM:-} > $OUT/layout_check.log 2>&1
grep -v "autotune" $OUT/layout_check.log | tail -8 | cut -c1-400
# which autotuning candidate won, per kernel kind (pointwise / reduction, XBLOCK RBLOCK warps)
python3 - $OUT/layout_check.log <<'PY'
import re, sys, collections
best = {}
for line in open(sys.argv[1]):
    m = re.search(r"autotune (\S+): XBLOCK=(\d+) RBLOCK=(\d+) warps=(\d+): ([\d.]+) us", line)
    if m:
        k, cfg, us = m.group(1), m.group(2, 3, 4), float(m.group(5))
        best.setdefault(k, []).append((us, cfg))
wins = collections.Counter(min(v)[1] for v in best.values())
print("autotune winners (XBLOCK, RBLOCK, warps): count", dict(wins.most_common(12)), "over", len(best), "kernels")
PY
echo "== done at $(( $(date +%s) - S0 )) s"
