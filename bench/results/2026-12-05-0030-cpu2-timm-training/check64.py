"""The same training step with the model and input in float64, eager against wick: the graph's math without
float32 rounding (step 2's input)."""
import torch, timm, wick, sys
name = sys.argv[1]
def build(): torch.manual_seed(0); return timm.create_model(name, num_classes=10, drop_rate=0.0).train().double()
me, mc = build(), build()
g = torch.Generator().manual_seed(1)
size = me.pretrained_cfg.get("input_size", (3, 224, 224))
x = torch.randn(2, *size, generator=g).double(); y = torch.randint(0, 10, (2,), generator=g)
le = torch.nn.functional.cross_entropy(me(x), y); le.backward()
lc = torch.nn.functional.cross_entropy(wick.compile(mc)(x), y); lc.backward()
ref = max(p.grad.abs().max().item() for p in me.parameters())
err = max((p.grad - q.grad).abs().max().item() for p, q in zip(me.parameters(), mc.parameters()))
st = wick.stats()
print(f"{name} float64: loss diff {abs(le.item() - lc.item()):.1e}, grad rel err {err / ref:.1e}, graphs {st['graphs']}, breaks {st['breaks']}")
