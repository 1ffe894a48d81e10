#!/bin/bash
# Cold GPU compiles, the compile workers before and after (light workers started ahead, cached batches skipped),
# then timm inference rows. From the repository root on the device; carry [".whl"]. old/: the two files of c1d3924.
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s); D=bench/results/2026-12-03-0930-h200
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
mkdir -p /tmp/oldrepo && cp -r wick bench setup.py /tmp/oldrepo/ && cp $D/old/_triton.py $D/old/backends.py /tmp/oldrepo/wick/
row() {  # tag name suite mode compiler [extra args]
  local tag=$1 name=$2 suite=$3 mode=$4 comp=$5; shift 5
  timeout 150 python3 bench/cold_compile.py --device cuda --suite $suite --model $name --mode $mode --compiler $comp \
    --json $OUT/cold.jsonl "$@" > $OUT/$tag.out 2> $OUT/$tag.err
  echo "$tag: $name $mode $comp rc=$? at $(( $(date +%s) - S0 )) s"
  python3 - "$OUT/$tag.out" <<'PY'
import json, sys
try:
    d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except Exception as e:
    print("  no result", e); sys.exit()
c = d["check"]
print("  first_call_s", d["first_call_s"], "cold_s", d["cold_s"], "graphs", c.get("graphs"), "fallbacks", c.get("fallbacks"), "err", c.get("rel_err_vs_eager"))
for k, v in d["phases"].items():
    if "triton" in k or "AOTAutograd" in k or "frame" in k:
        print("   ", k, v["n"], v["wall_s"])
PY
  tail -2 $OUT/$tag.err | cut -c1-300
}
row gpt2-new GPT2LMHeadModel huggingface inference wick-own
COLD_REPO=/tmp/oldrepo row gpt2-old GPT2LMHeadModel huggingface inference wick-own
WICK_TRITON_COMPILE_PROCS=0 row gpt2-threads GPT2LMHeadModel huggingface inference wick-own
row gpt2-dynamo-new GPT2LMHeadModel huggingface inference wick
COLD_REPO=/tmp/oldrepo row gpt2-dynamo-old GPT2LMHeadModel huggingface inference wick
row bert-train-new BertForMaskedLM huggingface training wick-own
COLD_REPO=/tmp/oldrepo row bert-train-old BertForMaskedLM huggingface training wick-own
row bert-train-inductor BertForMaskedLM huggingface training inductor
row resnet50-new resnet50 timm inference wick-own
echo "== rows at $(( $(date +%s) - S0 )) s"
TOTAL_S=$(( ${TOTAL_S:-540} - ($(date +%s) - S0) )) TESTS= \
  AB="timm:mobilenetv3_large_100|eager,inductor,wick|inference;timm:vit_base_patch16_224|eager,inductor,wick|inference;timm:convnext_base|eager,inductor,wick|inference" \
  bash bench/results/2026-12-02-1000-h200/run.sh
echo "== done in $(( $(date +%s) - S0 )) s"
