#!/bin/bash
# Third H200 call: where mobilenetv3_large_100's cold inference first call spends the 2.2 s after its last kernel
# compiled (call 2: 3.77 s cold, Triton's last job done at 1.57 s), with and without the cuDNN convolution warm-up:
# the first call's operators (--torch-profile) and its Python profile (--profile, top entries by cumulative time).
# From the repository root; carry [".whl"].
set -u
export PYTHONUNBUFFERED=1
S0=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo "build $? in $(( $(date +%s) - S0 )) s"
export PYTHONPATH=/tmp/site
for warm in 0 1; do
  rm -rf /tmp/cold3-$warm
  WICK_WARM_CUDNN=$warm COLD_DIR=/tmp/cold3-$warm timeout 100 python3 bench/cold_compile.py --device cuda --suite timm \
    --model mobilenetv3_large_100 --mode inference --compiler wick-own --torch-profile $OUT/ops-warm$warm.txt \
    --profile /tmp/prof-$warm.pstats --json $OUT/cold.jsonl > /dev/null 2>> $OUT/cold.err
  echo "warm $warm rc $?: $(python3 -c "
import json,sys; d=[json.loads(l) for l in open(sys.argv[1])][-1]; t=d.get('triton_timeline') or {}
print('cold', d['cold_s'], 'first', d['first_call_s'], {k: v for k, v in t.items() if k in ('jobs', 'processes_ready_s', 'last_job_ended_s')})" $OUT/cold.jsonl 2>&1 | tail -1)"
  python3 -c "
import pstats, sys
pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(28)" /tmp/prof-$warm.pstats 2>&1 | grep -v "^$" | tail -32 | cut -c1-160
  head -22 $OUT/ops-warm$warm.txt | cut -c1-150
done
echo "== done in $(( $(date +%s) - S0 )) s"
