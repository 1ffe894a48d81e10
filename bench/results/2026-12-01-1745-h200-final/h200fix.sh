#!/bin/bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
python3 setup.py -q build_ext --inplace --parallel 16 > $OUT/build.log 2>&1; echo build $?
timeout 100 python3 -m pytest tests/capture/test_breaks_inplace.py tests/capture/test_breaks_effects.py tests/capture/test_capture_tensor_setitem.py -p no:cacheprovider -p no:warnings -rfE -n 8 2>&1 | grep -v "DEBUG\|^$" | tail -c 100000 > $OUT/tests.log
grep -E "passed|failed" $OUT/tests.log | tail -2; grep "^FAILED\|^ERROR\|^E  " $OUT/tests.log | cut -c1-300 | head -20
cd tests/capture && PYTHONPATH=/tmp/site:../.. timeout 40 python3 -c "
import torch, wick, wick._C as C
from test_breaks_inplace import NormedThenUsed, t
m = wick.compile(NormedThenUsed())
for i in range(2): m(t(4, 3, seed=i))
for e in C.code_entries(NormedThenUsed.forward.__code__): print('ENTRY', e.get('eager'), e.get('graph_count'), e.get('reason'), [b.get('reason') for b in (e.get('breaks') or [])])
" 2>&1 | grep -v DEBUG | tail -8
