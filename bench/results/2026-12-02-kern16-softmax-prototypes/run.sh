#!/bin/sh
# run.sh KERNEL.c [ENTRY] [NBUF]: build the harness around one kernel file (the cc.c flags) and run it 3 times
gcc -O2 -march=native -fopenmp -fno-math-errno -ffp-contract=fast -mprefer-vector-width=512 -DKFILE="\"$1\"" -DNBUF=${3:-4} -DENTRY=${2:-wick_graph_cb1bf35760a0c09c} harness.c -o h_$1 -lmvec -lm && ./h_$1 && ./h_$1 && ./h_$1
