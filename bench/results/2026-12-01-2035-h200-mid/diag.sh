set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site:.
python3 setup.py -q build_ext --inplace --parallel 16 > /dev/null 2>&1; echo build $?
timeout 100 python3 .whl/gpt2diag.py 2>&1 | grep -v "Warning\|warn\|bos_token\|eos_token" | tail -5
git apply .whl/revert_idx.patch 2>&1 || patch -p1 < .whl/revert_idx.patch > /dev/null; echo applied $?
python3 setup.py -q build_ext --inplace --parallel 16 > /dev/null 2>&1; echo build $?
timeout 100 python3 .whl/gpt2diag.py 2>&1 | grep -v "Warning\|warn\|bos_token\|eos_token" | tail -5
