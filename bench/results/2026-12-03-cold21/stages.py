import pstats, sys
pats = [
 ("wick_backend (AOTAutograd incl. wick)", "backends.py", "wick_backend"),
 ("  import torch._functorch.aot_autograd", "aot_autograd.py", "<module>"),
 ("  create_aot_state (metadata trace)", "aot_autograd.py", "create_aot_state"),
 ("  aot_stage1_graph_capture (joint trace)", "graph_compile.py", "aot_stage1_graph_capture"),
 ("  partition (default_partition)", "partitioners.py", "default_partition"),
 ("  forward compile (wick, incl. cc wait)", "graph_compile.py", "_aot_stage2b_fw_compile"),
 ("  GraphModule.print_readable (logs)", "graph_module.py", "print_readable"),
 ("  Graph.python_code (FX codegen)", "graph.py", "python_code"),
 ("  GraphModule.__deepcopy__", "graph_module.py", "__deepcopy__"),
 ("to_fx", "backends.py", "to_fx"),
 ("backward compile take/wait (first backward)", "runtime_wrappers.py", "get_or_compile"),
]
for f in sys.argv[1:]:
    p = pstats.Stats(f)
    print(f, "total", round(p.total_tt, 3))
    for label, file, fn in pats:
        tot = sum(v[3] for k, v in p.stats.items() if k[0].endswith(file) and k[2] == fn)
        n = sum(v[1] for k, v in p.stats.items() if k[0].endswith(file) and k[2] == fn)
        print(f"  {label:50s} n={n:3d} {tot:.3f}")
