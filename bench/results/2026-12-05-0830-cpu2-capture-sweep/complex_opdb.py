"""op_db samples with complex64 inputs through wick.compile (own capture):
counts compiled / broke / wrong."""
import sys, torch, wick, traceback
from torch.testing._internal.common_methods_invocations import op_db
torch.manual_seed(0)
stats = {"one_graph": 0, "partial": 0, "eager": 0, "wrong": 0, "eager_raised": 0, "raise_mismatch": 0}
wrong = []
reasons = []
limit = int(sys.argv[1]) if len(sys.argv) > 1 else 3
for op in op_db:
    if torch.complex64 not in op.supported_dtypes("cpu"):
        continue
    try:
        samples = list(op.sample_inputs("cpu", torch.complex64, requires_grad=False))[:limit]
    except Exception:
        continue
    for si in samples:
        args, kwargs, fop = si.args, si.kwargs, op.op
        def fn(x, *rest):
            return fop(x, *rest, **kwargs)
        try:
            want = fn(si.input, *args)
        except Exception:
            stats["eager_raised"] += 1
            continue
        wick.reset()
        try:
            e = wick.explain(fn)(si.input, *args)
            got = e.result
        except Exception as ex:
            stats["raise_mismatch"] += 1
            wrong.append((op.name, "raised " + repr(ex)[:150]))
            continue
        if op.name.startswith("empty") or op.name in ("new_empty", "new_empty_strided"):
            continue
        try:
            torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-4)
        except Exception as ex:
            stats["wrong"] += 1
            wrong.append((op.name, str(ex).replace("\n", " ")[:200]))
            continue
        if op.name.startswith("empty") or op.name in ("new_empty", "new_empty_strided"):
            continue  # uninitialised memory: nothing to compare
        if e.graph_count >= 1 and not e.break_reasons:
            stats["one_graph"] += 1
        elif e.graph_count >= 1:
            stats["partial"] += 1
            reasons.append(e.break_reasons[0].split(" at ")[0][:90])
        else:
            stats["eager"] += 1
            reasons.append((e.break_reasons or ["?"])[0].split(" at ")[0][:90])
print(stats)
import collections
print(collections.Counter(reasons).most_common(25))
for w in wrong: print("  ", w)
