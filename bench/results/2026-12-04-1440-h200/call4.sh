#!/bin/bash
# Fourth H200 call: mobilenetv3_large_100's cold inference compile with and without the cuDNN convolution warm-up,
# alternating, now that the warm-up calls torch.convolution (whose binding releases the GIL: call 3 showed the
# warm-up's 45 plan builds, ~2.7 s, and the Triton feed threads stalling behind them); resnet50 and convnext_base
# cold once more. No profiler. From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
cold() {  # model warm
  rm -rf /tmp/cold4
  WICK_WARM_CUDNN=$2 COLD_DIR=/tmp/cold4 timeout 100 python3 bench/cold_compile.py --device cuda --suite timm \
    --model $1 --mode inference --compiler wick-own --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "$1 warm $2 rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print('cold', d['cold_s'], 'rel err', d['check'].get('rel_err_vs_eager'), {k: v for k, v in t.items() if k in ('jobs', 'processes_ready_s', 'last_job_ended_s')})" $OUT/cold.jsonl 2>&1 | tail -1)"
}
cold resnet50 1
for i in 1 2; do cold mobilenetv3_large_100 0; cold mobilenetv3_large_100 1; done
cold convnext_base 1
cold resnet50 0
echo "== done in $(( $(date +%s) - S0 )) s"
