"""The C prelude's vector exp (wk_expf8: softmax's and log-softmax's exp-sum
blocks, logsumexp and cross-entropy shapes, the pointwise chain's exp chunks)
taken out of a generated kernel's source and compiled alone with the flags
wick's compiler uses, then run over dense slices of the float range against
exp in double: its ulp error, the edges of its short path (|x| <= 87), the
denormal results, overflow and the special values."""
import os
import shutil
import subprocess

import pytest
import torch

from compiler_session import compile_run

DRIVER = r"""
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
%s
/* the ulp of the float nearest v; 2^-149 for denormal results */
static double ulp_of(double v) {
    float f = (float)v;
    if (fabsf(f) < 0x1p-126f) return 0x1p-149;
    int e;
    frexp(f, &e);
    return ldexp(1.0, e - 24);
}
static double err_of(float x, float got) {
    double want = exp((double)x);
    if (want > (double)0x1.fffffep127f + ldexp(1.0, 103)) return isinf(got) && got > 0 ? 0 : 1e9;
    return fabs((double)got - want) / ulp_of(want);
}
/* argv: lo hi stride; prints the largest ulp error over the floats of [lo, hi]
   (every stride-th bit pattern) and where */
int main(int argc, char **argv) {
    float lo = strtof(argv[1], 0), hi = strtof(argv[2], 0);
    uint32_t stride = (uint32_t)atol(argv[3]);
    double worst = 0;
    float worst_x = 0, xs[8];
    long n = 0;
    for (uint64_t b = 0; b < 0x100000000ull; b += stride) {
        uint32_t u = (uint32_t)b;
        float x;
        memcpy(&x, &u, 4);
        if (!(x >= lo && x <= hi)) continue;
        xs[n++ & 7] = x;
        if (n & 7) continue;
        wk_v8f v;
        memcpy(&v, xs, sizeof v);
        v = wk_expf8(v);
        for (int q = 0; q < 8; q++) {
            double e = err_of(xs[q], v[q]);
            if (e > worst) worst = e, worst_x = xs[q];
        }
    }
    printf("%%ld %%.4f %%a\n", n, worst, worst_x);
    return 0;
}
"""

SPECIALS = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>
%s
int main(void) {
    float xs[8] = {-INFINITY, INFINITY, NAN, -0.0f, 88.72283f, 88.7229f, -103.98f, -1e30f};
    wk_v8f v;
    memcpy(&v, xs, sizeof v);
    v = wk_expf8(v);
    for (int q = 0; q < 8; q++) printf("%%a\n", v[q]);
    return 0;
}
"""


def prelude_exp_text():
    """wk_expf8 and what it needs, from the source of a float32 softmax."""
    x = torch.randn(32, 300, generator=torch.Generator().manual_seed(70))
    cg, _ = compile_run(lambda g, a: [g.op("exp", [g.op("sub", [a, g.op("amax", [a], dims=[1], keepdim=True)])])], x)
    with open(cg.library_path[:-3] + ".c") as f:
        src = f.read()
    if "static inline wk_v8f wk_expf8" not in src:
        return None
    start = src.index("typedef float wk_v8f ")
    end = src.index("\n}\n", src.index("static inline wk_v8f wk_expf8")) + 3
    return src[start:end]


@pytest.fixture(scope="module")
def exp_programs(tmp_path_factory):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    text = prelude_exp_text()
    if text is None:
        pytest.skip("no AVX2/FMA: the prelude's exp is expf")
    d = tmp_path_factory.mktemp("prelude-exp")
    progs = {}
    for name, body in (("ulp", DRIVER), ("specials", SPECIALS)):
        c = os.path.join(d, name + ".c")
        with open(c, "w") as f:
            f.write(body % text)
        exe = os.path.join(d, name)
        # the flags of csrc/runtime/cc.c that change floating point code
        subprocess.run([cc, "-O2", "-march=native", "-fno-math-errno", "-ffp-contract=fast", c, "-o", exe, "-lm"],
                       check=True)
        progs[name] = exe
    return progs


# (lo, hi, stride): every float of the edges (the short path's bound at |x| = 87,
# n = -126 below it, the denormal results, overflow at 88.72), a sample elsewhere
RANGES = [
    (-88.0, -86.0, 1),
    (86.0, 89.0, 1),
    (-104.0, -88.0, 3),
    (-1.0, 1.0, 5),
    (-200.0, 200.0, 101),
]


@pytest.mark.parametrize("lo,hi,stride", RANGES)
def test_prelude_exp_within_one_ulp(exp_programs, lo, hi, stride):
    out = subprocess.run([exp_programs["ulp"], str(lo), str(hi), str(stride)], check=True,
                         capture_output=True, text=True).stdout.split()
    count, worst, where = int(out[0]), float(out[1]), out[2]
    assert count > 10000
    # 0.89 ulp measured over all floats (the float64 reference rounds once more)
    assert worst <= 1.0, f"{worst} ulp at x = {where}"


def test_prelude_exp_special_values(exp_programs):
    out = subprocess.run([exp_programs["specials"]], check=True, capture_output=True, text=True).stdout.split()
    got = [float.fromhex(v) if v not in ("inf", "-inf", "nan", "-nan") else float(v) for v in out]
    assert got[0] == 0.0  # exp(-inf)
    assert got[1] == float("inf")
    assert got[2] != got[2]  # NaN stays NaN
    assert got[3] == 1.0  # exp(-0)
    assert 3.4e38 < got[4] < float("inf")  # exp(88.72283f): finite, near the largest float
    assert got[5] == float("inf")
    assert got[6] == 0.0  # below half the smallest denormal
    assert got[7] == 0.0
