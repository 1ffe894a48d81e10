"""max ulp error of wick's float32 softmax / log_softmax against float64 on the same float32 x - max"""
import os, sys, tempfile
os.environ["WICK_CACHE_DIR"] = tempfile.mkdtemp()
import torch
import wick._C as C
C.env_reload()
def run(build, x):
    g = C.Graph(); a = g.input_like(x)
    for o in build(g, a): g.output(o)
    cg = g.compile(); return cg(x)[0]
def sm(g, a):
    m = g.op("amax", [a], dims=[1], keepdim=True); e = g.op("exp", [g.op("sub", [a, m])])
    return [g.op("div", [e, g.op("sum", [e], dims=[1], keepdim=True)])]
gen = torch.Generator().manual_seed(5)
def inputs(cols):
    x = (torch.rand((64, cols), generator=gen, dtype=torch.float64) * 200 - 100).float()
    x[:32] = (torch.rand((32, cols), generator=gen, dtype=torch.float64) * 20 - 10).float()
    x[3, 5] = float("-inf"); x[4, :] = float("-inf"); x[5, 7] = float("nan"); x[6, 9] = -1e30
    x[7, :] = torch.linspace(-104, 0, cols)  # every exp range, the denormal results included
    return x
def ulp_err(got, x):
    ed = torch.exp((x - x.amax(1, keepdim=True)).double()); want = ed / ed.sum(1, keepdim=True)
    ok = ~torch.isnan(want)
    assert torch.equal(torch.isnan(got), ~ok)
    ulp = torch.ldexp(torch.ones_like(want), (torch.frexp(want)[1] - 24).clamp(min=-149))
    e = ((got.double() - want).abs() / ulp)[ok]
    big = ok & (want >= 2.0 ** -126)
    return e.max().item(), ((got.double() - want).abs() / ulp)[big].max().item()
for cols in (1000, 4096, 263):
    x = inputs(cols)
    w = ulp_err(run(sm, x), x); t = ulp_err(torch.softmax(x, 1), x)
    print(f"cols {cols}: wick softmax max ulp {w[0]:.2f} (normal results {w[1]:.2f}); torch.softmax float32 {t[0]:.2f} ({t[1]:.2f})")
