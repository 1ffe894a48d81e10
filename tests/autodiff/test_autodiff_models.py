"""Training steps of transformers models (random weights, tiny configs)
through wick.compile with wick's own autodiff: the loss and every
parameter's gradient against eager's, in float32 and under bfloat16
autocast, for two steps (the second reuses the compiled graphs). Every
graph must take wick's autodiff: none goes to AOTAutograd and none runs
eagerly."""
import copy

import pytest
import torch

import wick

transformers = pytest.importorskip("transformers")
from wick.bench import models as M  # noqa: E402

MODELS = ["GPT2LMHeadModel", "BertForMaskedLM", "LlamaForCausalLM", "T5ForConditionalGeneration",
          "DistilBertForMaskedLM", "ViTForImageClassification"]


def _step(fn, built, autocast):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = built.loss(M.call(fn, built.inputs))
    loss.backward()
    return loss.detach()


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bf16-autocast"])
@pytest.mark.parametrize("name", MODELS)
def test_training_step_gradients_equal_eager(name, autocast):
    spec = M.ModelSpec(suite="huggingface", name=name, batch=2, options={"size": "tiny", "seq": "16"})
    built = M.build(spec, 2, "cpu")
    ref = copy.deepcopy(built.model)
    wick.reset()
    compiled = wick.compile(built.model)
    for step in range(2):
        for m in (built.model, ref):
            m.zero_grad(set_to_none=True)
        got = _step(compiled, built, autocast)
        want = _step(ref, built, autocast)
        tol = dict(rtol=2e-2, atol=2e-2) if autocast else dict(rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(got, want, **tol)
        scale = max(p.grad.abs().max().item() for p in ref.parameters() if p.grad is not None)
        for (pname, p), (_, q) in zip(built.model.named_parameters(), ref.named_parameters()):
            assert (p.grad is None) == (q.grad is None), pname
            if q.grad is not None:
                # relative to the largest gradient: some are 0 in exact arithmetic (a key bias before softmax)
                err = (p.grad - q.grad).abs().max().item() / scale
                assert err < (2e-2 if autocast else 1e-5), (step, pname, err)
    stats = wick.stats()
    assert stats["graphs"] >= 1 and not stats["fallbacks"], stats
    assert stats["autodiff"]["graphs"] == stats["graphs"], stats["autodiff"]
    assert stats["autodiff"]["fallbacks"] == 0, stats["autodiff"]
