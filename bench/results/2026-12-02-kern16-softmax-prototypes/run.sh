#!/bin/sh
# run.sh KERNEL.c [ENTRY] [NBUF]: build the harness around one kernel file (the cc.c flags) and run it 3 times.
# The variants are kept as patches against the generated kernels (sm_*.patch against sm0.c, pw*.patch against
# pw0.c): a KERNEL.c that is not here is made from its patch first.
if [ ! -f "$1" ] && [ -f "${1%.c}.patch" ]; then
  case "$1" in pw*) base=pw0.c ;; *) base=sm0.c ;; esac
  patch -s -o "$1" "$base" < "${1%.c}.patch" || exit 1
fi
gcc -O2 -march=native -fopenmp -fno-math-errno -ffp-contract=fast -mprefer-vector-width=512 -DKFILE="\"$1\"" -DNBUF=${3:-4} -DENTRY=${2:-wick_graph_cb1bf35760a0c09c} harness.c -o h_$1 -lmvec -lm && ./h_$1 && ./h_$1 && ./h_$1
