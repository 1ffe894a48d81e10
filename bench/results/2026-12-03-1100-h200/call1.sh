#!/bin/bash
# Autotuning after the first call (WICK_TRITON_TUNE=later, the default, against =first in the same run): the GPU and
# codegen tests, cold first calls, and what the first configs cost before tuning. From the repository root on the
# device; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
timeout ${TESTS_S:-200} python3 -m pytest ${TESTS:-tests/gpu tests/codegen} -p no:cacheprovider -p no:warnings -rfE -q \
  --tb=short -n 16 > $OUT/tests.log 2>&1
echo "tests rc=$? at $(( $(date +%s) - S0 )) s"; tail -1 $OUT/tests.log
grep "^FAILED\|^ERROR" $OUT/tests.log | cut -c1-300 | head -20
row() {  # tag name suite mode compiler
  local tag=$1 name=$2 suite=$3 mode=$4 comp=$5; shift 5
  timeout 150 python3 bench/cold_compile.py --device cuda --suite $suite --model $name --mode $mode --compiler $comp \
    --json $OUT/cold.jsonl "$@" > $OUT/$tag.out 2> $OUT/$tag.err
  echo "$tag: $name $mode $comp TUNE=${WICK_TRITON_TUNE:-later} rc=$? at $(( $(date +%s) - S0 )) s"
  python3 - "$OUT/$tag.out" <<'PY'
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:
    print("  no result", e); sys.exit()
c = d["check"]
print("  first_call_s", d["first_call_s"], "tuned_s", d.get("tuned_s"), "steady_s", d["steady_s"], "graphs", c.get("graphs"),
      "fallbacks", c.get("fallbacks"), "err", c.get("rel_err_vs_eager"), "pass", d["pass"])
for k, v in d["phases"].items():
    if "triton" in k or "AOTAutograd" in k or "frame" in k:
        print("   ", k, v["n"], v["wall_s"])
PY
  tail -1 $OUT/$tag.err | cut -c1-300
}
for tune in later first; do
  export WICK_TRITON_TUNE=$tune
  row gpt2-$tune GPT2LMHeadModel huggingface inference wick-own
  row bert-train-$tune BertForMaskedLM huggingface training wick-own
  row resnet50-$tune resnet50 timm inference wick-own
done
unset WICK_TRITON_TUNE
# each kernel's first config against its tuned best (all candidates timed at the first call)
for m in "GPT2LMHeadModel huggingface inference" "BertForMaskedLM huggingface training" "resnet50 timm training"; do
  set -- $m
  WICK_LOG=perf WICK_TRITON_TUNE=first timeout 150 python3 bench/cold_compile.py --device cuda --suite $2 --model $1 \
    --mode $3 --compiler wick > /dev/null 2> $OUT/tune-$1-$3.err
  python3 - $OUT/tune-$1-$3.err "$1 $3" <<'PY'
import re, sys
per = {}
for ln in open(sys.argv[1], errors="replace"):
    m = re.match(r"\[wick:perf\] autotune (\S+): XBLOCK=(\d+) RBLOCK=(\d+) warps=(\d+): ([\d.]+) us", ln)
    if m:
        per.setdefault(m.group(1), []).append(float(m.group(5)))
first = sum(v[0] for v in per.values()); best = sum(min(v) for v in per.values())
won = sum(1 for v in per.values() if v[0] == min(v))
worst = sorted(((v[0] / min(v), k) for k, v in per.items()), reverse=True)[:3]
print(f"{sys.argv[2]}: {len(per)} tuned kernels, first config best in {won}; kernel time first configs {first:.0f} us, "
      f"tuned {best:.0f} us ({first / max(best, 1e-9):.3f}x); worst {[(round(r, 2), k) for r, k in worst]}")
PY
done
echo "== done in $(( $(date +%s) - S0 )) s"
