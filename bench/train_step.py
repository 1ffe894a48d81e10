"""Time one training step of the huggingface bench models, eager vs inductor vs wick, in one process.

    python bench/train_step.py --models GPT2LMHeadModel --compilers eager,inductor,wick --repeats 7
    python bench/train_step.py --models GPT2LMHeadModel --compilers wick --profile 20
    python bench/train_step.py --compilers inductor,wick,wick-noemb   # A/B: wick without one optimisation
    python bench/train_step.py --compilers wick,wick-own   # torch.compile(backend="wick") vs wick.compile
    python bench/train_step.py --compilers wick,wick-own --mode inference --externs   # each graph's extern calls

Same models, sizes and step (SGD, loss.backward) as ``python -m wick.bench``; timing interleaves
the compilers so that load from other processes hits each alike. ``--profile N`` prints torch's
profiler table (self CPU time per op) for N steps of each compiler: where a step's time goes,
which ATen ops remain outside the compiled kernels.
"""
import argparse
import copy
import os
import statistics
import sys
import time

import torch
import torch._dynamo

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from wick.bench import models as M  # noqa: E402


def make_step(fwd, module, inputs, loss_fn):
    opt = torch.optim.SGD(module.parameters(), lr=0.01)

    def step():
        opt.zero_grad(set_to_none=True)
        out = M.call(fwd, {k: v.clone() for k, v in inputs.items()})
        loss = loss_fn(out)
        loss.backward()
        opt.step()
        return loss
    return step


def print_externs(model, comp, graphs_before):
    """The extern calls of the graphs compiler `comp` made for `model`:
    torch.compile(backend="wick")'s from wick.backends.compiled_graphs,
    wick.compile's from the graphs of its cache entries (EXTERN nodes)."""
    import collections
    import re

    if comp.startswith("wick-own"):
        import wick

        for e in wick._entries(wick._compiled_codes):
            if e.get("eager") or not e.get("graph_count"):
                continue
            names = collections.Counter(re.findall(r"EXTERN\[\d+ ([^\]]+)\]", e.get("graph") or ""))
            code = e.get("code")
            where = f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})" if code else "?"
            print(f"  {model} {comp} graph of {where}: {sum(names.values())} extern calls {dict(names)}", flush=True)
    elif comp.startswith("wick") and "wick.backends" in sys.modules:
        for info in sys.modules["wick.backends"].compiled_graphs[graphs_before:]:
            print(f"  {model} {comp} {info['graph']} graph: {info['extern']} extern calls {info['externs']}",
                  flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="BertForMaskedLM,GPT2LMHeadModel,DistilBertForMaskedLM,LlamaForCausalLM")
    p.add_argument("--compilers", default="eager,inductor,wick")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--profile", type=int, default=0)
    p.add_argument("--rows", type=int, default=25)
    p.add_argument("--threads", type=int, default=2,
                   help="torch threads; 1 with the CPU-time column is the least noisy on a shared box")
    p.add_argument("--mode", default="training", choices=["training", "inference"])
    p.add_argument("--externs", action="store_true",
                   help="print each compiled graph's extern calls (wick: torch.compile's graphs; wick-own: "
                        "wick.compile's), counted by callable")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    import torch._inductor.config as icfg
    icfg.fallback_random = True
    # every model and compiler adds entries to the code objects models share
    # (wick-<flag> is a backend of its own): no silent eager fallback at 8
    torch._dynamo.config.recompile_limit = 64
    if "wick" in a.compilers:
        import wick.backends  # noqa: F401
    for name in a.models.split(","):
        spec = [s for s in M.load_suite("huggingface") if s.name == name][0]
        built = M.build_huggingface(spec, spec.batch, "cpu")
        steps = {}
        for comp in a.compilers.split(","):
            module = copy.deepcopy(built.model)
            if a.mode == "inference":
                module.eval()
            # wick-<flag>: wick with one of its optimisations off while it compiles
            # (the first two steps), for A/B runs in one process
            flag = {"wick-noemb": "_native_embedding_backward"}.get(comp)
            if flag:
                import wick.backends as wb
                saved = getattr(wb, flag)
                setattr(wb, flag, False)
                # a backend of its own: dynamo's cache would hand it the "wick" entry
                backend = lambda gm, example_inputs: wb.wick_backend(gm, example_inputs)  # noqa: E731
            graphs_before = len(sys.modules["wick.backends"].compiled_graphs) if "wick.backends" in sys.modules else 0
            if comp == "wick-own":  # wick.compile: wick's own capture in front of wick's compiler
                import wick
                fwd = wick.compile(module)
            else:
                fwd = module if comp == "eager" else torch.compile(module, backend=backend if flag else comp)
            if a.mode == "training":
                st = make_step(fwd, module, built.inputs, built.loss)
            else:
                def st(fwd=fwd):
                    with torch.no_grad():
                        return M.call(fwd, built.inputs)
            t0 = time.perf_counter()
            st()
            t1 = time.perf_counter()
            st()
            if flag:
                setattr(wb, flag, saved)
            print(f"{name} {comp}: first call {t1 - t0:.2f} s", flush=True)
            if a.externs:
                print_externs(name, comp, graphs_before)
            steps[comp] = st
        times = {c: [] for c in steps}
        cpu = {c: [] for c in steps}
        for _ in range(a.repeats):
            for c, st in steps.items():
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(a.iters):
                    st()
                times[c].append((time.perf_counter() - t0) / a.iters * 1e3)
                cpu[c].append((time.process_time() - c0) / a.iters * 1e3)
        eager = statistics.median(times["eager"]) if "eager" in times else None
        for c, ts in times.items():
            med = statistics.median(ts)
            sp = f"  speedup {eager / med:.2f}x" if eager else ""
            print(f"{name} {a.mode} {c:9s} median {med:8.2f} ms  min {min(ts):8.2f}  "
                  f"cpu {statistics.median(cpu[c]):8.2f} ms  cpu min {min(cpu[c]):8.2f}{sp}", flush=True)
        if a.profile:
            for c, st in steps.items():
                with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
                    for _ in range(a.profile):
                        st()
                print(f"==== {name} {c}: {a.profile} steps")
                print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))


if __name__ == "__main__":
    main()
