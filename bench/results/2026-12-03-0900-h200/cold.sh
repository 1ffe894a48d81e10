#!/bin/bash
# Where a cold GPU compile's time goes: bench/cold_compile.py --device cuda for a few rows (each a fresh process
# with empty caches), a cProfile of wick's GPT-2 first call, then the tests that failed at 3aa008b (torch 2.11's
# AOTAutograd stages). From the repository root on the device; carry [".whl"]. Results under $OUT.
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
python3 -c "import sys, torch, triton; print(sys.version.split()[0], 'torch', torch.__version__, 'triton', triton.__version__)"
row() {  # name suite mode compiler [extra args]
  local name=$1 suite=$2 mode=$3 comp=$4; shift 4
  timeout 150 python3 bench/cold_compile.py --device cuda --suite $suite --model $name --mode $mode --compiler $comp \
    --json $OUT/cold.jsonl "$@" > $OUT/$name-$mode-$comp.out 2> $OUT/$name-$mode-$comp.err
  echo "$name $mode $comp rc=$? at $(( $(date +%s) - S0 )) s"
  python3 - "$OUT/$name-$mode-$comp.out" <<'PY'
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:
    print("  no result", e); sys.exit()
print("  first_call_s", d["first_call_s"], "cold_s", d["cold_s"], "cpu_s", d["cpu_s"], "children_cpu_s", d["children_cpu_s"], "pass", d["pass"])
for k, v in d["phases"].items():
    print("   ", k, v)
PY
  tail -3 $OUT/$name-$mode-$comp.err | cut -c1-300
}
row GPT2LMHeadModel huggingface inference wick-own --profile $OUT/gpt2-own.prof
row GPT2LMHeadModel huggingface inference inductor
row BertForMaskedLM huggingface training wick-own
row resnet50 timm inference wick-own
WICK_TRITON_COMPILE_PROCS=0 row GPT2LMHeadModel huggingface inference wick-own
python3 - $OUT/gpt2-own.prof <<'PY' > $OUT/gpt2-own-profile.txt
import pstats, sys
p = pstats.Stats(sys.argv[1])
p.sort_stats("cumulative").print_stats(45)
p.sort_stats("tottime").print_stats(30)
PY
head -120 $OUT/gpt2-own-profile.txt | cut -c1-200
echo "== tests at $(( $(date +%s) - S0 )) s"
timeout 200 python3 -m pytest tests/capture/test_capture_early_backward.py tests/capture/test_capture_more_natives.py \
  tests/capture/test_capture_training.py tests/runtime/test_channels_last.py tests/runtime/test_channels_last_training.py \
  tests/runtime/test_fx_backend.py -p no:cacheprovider -p no:warnings -rfE -q --tb=short -n 16 2>&1 | tail -25
echo "== done in $(( $(date +%s) - S0 )) s"
