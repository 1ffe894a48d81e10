#!/bin/sh
# run.sh KERNEL.c [ENTRY] [NBUF]: build the harness around one kernel file with the flags wick's cc.c uses.
# Variants are patches: sm_*.patch against sm1.c (the one-thread softmax bw20 generates), sm_pipe.patch
# against sm_lagp.c (the two-thread softmax with the parallel lag, before the fused exp-sum).
# A KERNEL.c that is not here is made from its patch first. Then: OMP_NUM_THREADS=1 ./h_KERNEL [out.bin]
if [ ! -f "$1" ] && [ -f "${1%.c}.patch" ]; then
  case "$1" in sm_pipe*) base=sm_lagp.c ;; *) base=sm1.c ;; esac
  patch -s -o "$1" "$base" < "${1%.c}.patch" || exit 1
fi
gcc -O2 -march=native -fopenmp -fno-math-errno -ffp-contract=fast -mprefer-vector-width=512 -DKFILE="\"$1\"" -DNBUF=${3:-4} -DENTRY=${2:-wick_graph_cb1bf35760a0c09c} harness.c -o h_${1%.c} -lmvec -lm
