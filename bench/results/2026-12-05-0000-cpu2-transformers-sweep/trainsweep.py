"""A training step's forward and backward through wick.compile on the CPU: each model in eval mode (no dropout,
so eager and wick draw nothing random) with its parameters requiring grad, `labels` given so the model
computes its loss; the loss and every parameter's gradient compared with eager's, relative to the largest
gradient; graphs, breaks and fallbacks from wick.stats()."""
import sys

import torch
import transformers as T

import wick

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from hfsweep_config import small_config  # noqa: E402

for name in sys.argv[1].split(","):
    try:
        torch.manual_seed(0)
        cfg = small_config(name)
        me = getattr(T, name)(cfg).eval()
        torch.manual_seed(0)
        mc = getattr(T, name)(cfg).eval()
        ids = torch.randint(2, 1000, (2, 16))
        labels = torch.randint(2, 1000, (2, 16))  # not the inputs: a model that copies its input (Funnel) has ~0 loss
        kw = {"input_ids": ids, "labels": labels}
        if getattr(cfg, "is_encoder_decoder", False):
            kw["decoder_input_ids"] = ids[:, :8].contiguous()
            kw["labels"] = labels[:, :8].contiguous()
        if "ForCausalLM" in name or "LMHead" in name:
            kw["use_cache"] = False
        wick.reset()
        f = wick.compile(mc)
        le = me(**kw).loss
        le.backward()
        for step in range(2):
            mc.zero_grad()
            lc = f(**kw).loss
            lc.backward()
        gmax = max(p.grad.abs().max().item() for p in me.parameters() if p.grad is not None and p.numel())
        gerr = max(((p.grad if p.grad is not None else torch.zeros_like(q)) -
                    (q.grad if q.grad is not None else torch.zeros_like(p))).abs().max().item()
                   for p, q in zip(me.parameters(), mc.parameters()) if p.numel())
        st = wick.stats()
        reasons = st["break_reasons"] + [str(r) for r in st["fallbacks"]]
        print(f"{name}: loss err {abs(le.item() - lc.item()):.1e}, grad rel err {gerr / gmax:.1e}, graphs {st['graphs']}, "
              f"breaks {st['breaks']}, fallbacks {len(st['fallbacks'])}; {reasons[:1]}", flush=True)
    except Exception as e:
        print(f"{name}: ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
