# kernel counts of the transformers models' inference graphs (own capture), via test_models._run
import sys, os; sys.path.insert(0, os.path.join(os.getcwd(), 'tests/capture'))
import torch, wick._C as C
import test_models as M
from test_capture_util import entry_tree
for make in [M.bert, M.gpt2, M.llama, M.t5, M.vit, M.whisper, M.distilbert, M.roberta]:
    C.reset()
    expected, got, _ = M._run(make)
    model = make()[0]
    es = entry_tree(type(model).forward.__code__)
    src = "\n".join(e.get("source") or "" for e in es if not e["eager"])
    ks = [l for l in src.splitlines() if l.startswith("/* kernel")]
    print(make.__name__, "graphs", sum(e["graph_count"] for e in es if not e["eager"]), "eager", sum(1 for e in es if e["eager"]),
          "kernels", len(ks), "with CONVERT/VIEW", sum(1 for l in ks if "CONVERT" in l or "VIEW" in l), flush=True)
