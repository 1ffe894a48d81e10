"""Python functions wick's own capture inlines in place of a torch call whose
eager kernel is a composite of ops capture has rules for: the graph then
holds those ops (fused kernels and extern matmuls), not one opaque call.
Each function computes what eager's kernel computes, op for op, in the same
dtypes; capture interprets its bytecode like user code, so it must stay
plain torch code (no data-dependent Python branches on tensor values)."""
import math

import torch


def _matmul(a, b):
    """torch.matmul as eager's at::matmul runs it for these operands: mm for
    matrices, else both expanded to the common batch sizes, folded to one
    batch dimension (views where the layout allows, as eager's reshape) and
    multiplied by bmm. Capture models mm and bmm as extern kernels the runtime
    calls natively; torch.matmul itself would be a Python call. Operands of
    different ranks keep torch.matmul."""
    if a.dim() == 2 and b.dim() == 2:
        return torch.mm(a, b)
    if a.dim() != b.dim() or a.dim() < 3:
        return torch.matmul(a, b)
    batch = []
    for x, y in zip(a.shape[:-2], b.shape[:-2]):
        batch.append(y if x == 1 else x)
    n, k, m = a.shape[-2], a.shape[-1], b.shape[-1]
    a3 = a.expand(*batch, n, k).reshape(-1, n, k)
    b3 = b.expand(*batch, k, m).reshape(-1, k, m)
    return torch.bmm(a3, b3).view(*batch, n, m)


def attention_math(query, key, value, attn_mask, is_causal, scale, device_type):
    """F.scaled_dot_product_attention where eager runs the math path
    (aten._scaled_dot_product_attention_math; capture calls this only when
    torch._fused_sdp_choice answers math and dropout is 0). The inputs are
    those eager's kernel gets: already cast by the caller's autocast. The
    kernel runs below autocast's dispatch, so its ops here run with autocast
    off; 16-bit inputs are computed in float32 and the result cast back.
    A bool mask is first made additive (0 / -inf) in the query's dtype, as
    eager does before choosing the kernel. q and k are each scaled by the
    square root of the scale; rows that are all -inf give 0, not NaN, and a
    gradient of 0 (aten._safe_softmax)."""
    dtype = query.dtype
    # a dtype every autocast of the device accepts: with the caller's (which
    # may be float32) torch.autocast would warn, even to turn it off
    with torch.autocast(device_type, dtype=torch.float16 if device_type == "cuda" else torch.bfloat16, enabled=False):
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=dtype).masked_fill(attn_mask.logical_not(), -math.inf)
        if dtype == torch.float16 or dtype == torch.bfloat16:
            query, key, value = query.float(), key.float(), value.float()
        if scale is None:
            scale = 1.0 / math.sqrt(query.shape[-1])
        factor = math.sqrt(abs(scale))
        query = query * (0.0 - factor if scale < 0 else factor)
        if is_causal:
            # eager's ones(L, S).tril(): column <= row
            rows = torch.arange(query.shape[-2], device=query.device)
            causal = rows[:, None] >= torch.arange(key.shape[-2], device=query.device)
            attn_mask = torch.zeros_like(causal, dtype=query.dtype).masked_fill(causal.logical_not(), -math.inf)
        attn = _matmul(query, key.transpose(-2, -1) * factor)
        if attn_mask is not None:
            attn = attn + attn_mask
        # the rows all -inf are 0 before the softmax too, so that their
        # gradient is 0 as _safe_softmax's, not NaN
        empty_rows = attn.amax(-1, keepdim=True) == -math.inf
        probs = torch.softmax(attn.masked_fill(empty_rows, 0.0), -1).masked_fill(empty_rows, 0.0)
        return _matmul(probs, value).to(dtype)


class RecordedFunctionCall:
    """Fn.apply for a call of a user's autograd.Function that records its
    backward, made an extern call by capture (csrc/capture/vals/userobj.c).
    The compiled forward calls it with grad mode off on tensors that need no
    grad; it gives Fn's forward what eager gives it (grad mode on, and
    requires_grad on the arguments that had it, so ctx.needs_input_grad and
    torch.is_grad_enabled() read as in eager) and returns the results
    detached. Called under grad mode (the backward calls it again under
    autograd: wick/_autodiff.py _RecomputedGradient; the fake-tensor runs of
    capture) it is Fn.apply itself."""

    def __init__(self, apply, needs_input_grad):
        self.apply = apply
        self.needs_input_grad = needs_input_grad

    def __call__(self, *args, **kwargs):
        import torch

        if torch.is_grad_enabled():
            return self.apply(*args, **kwargs)
        args = tuple(a.detach().requires_grad_() if k < len(self.needs_input_grad) and self.needs_input_grad[k] and
                     isinstance(a, torch.Tensor) else a for k, a in enumerate(args))
        with torch.enable_grad():
            out = self.apply(*args, **kwargs)
        if isinstance(out, (tuple, list)):
            return type(out)(o.detach() if isinstance(o, torch.Tensor) else o for o in out)
        return out.detach() if isinstance(out, torch.Tensor) else out


class NoBackwardCtx:
    """The ctx a custom torch.autograd.Function's forward gets when capture
    inlines a call that records no backward (grad mode off, or no tensor
    argument requires grad; csrc/capture/vals/userobj.c). What the forward
    saves or marks is kept only as eager's ctx would show it to the forward
    itself; nothing reads it after the call. Attributes the forward sets
    live on it as on eager's ctx."""

    def __init__(self, needs_input_grad):
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        self.saved_for_forward = tensors

    def mark_dirty(self, *tensors):
        self.dirty_tensors = tensors

    def mark_non_differentiable(self, *tensors):
        self.non_differentiable = tensors

    def set_materialize_grads(self, value):
        self.materialize_grads = value


def rnn_update_flat_weights(self):
    """nn.LSTM/GRU/RNN's _update_flat_weights as capture runs it: capture
    reads self._flat_weights as the parameters self._flat_weights_names
    names (csrc/capture/vals/object.c), the list eager's call leaves after a
    parameter was replaced, so nothing is left to do here."""
    return None


def associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):
    """torch._higher_order_ops.associative_scan as plain torch code: the
    inclusive scan of xs (a tensor, or a tuple or list of tensors of one
    length along dim: capture inlines this only for those) under combine_fn,
    which takes and returns that structure. A log-depth scan (pairs
    combined, the pairs' scan, the even positions filled in), so the graph
    holds about 2*log2(n) slices of combine_fn's ops instead of an n-step
    loop. combine_fn must be associative, as the op requires; the order of
    combination differs from a left-to-right loop's, so floating results
    match one within rounding. The arguments eager refuses raise the errors
    eager raises (ValueError; RuntimeError for reverse)."""
    single = isinstance(xs, torch.Tensor)
    leaves = [xs] if single else list(xs)
    if not callable(combine_fn):
        raise ValueError(f"associative_scan: combine_fn is not callable: {combine_fn}")
    if not isinstance(dim, int):
        raise ValueError(f"associative_scan: dim must be an int, not {type(dim)}")
    if not isinstance(reverse, bool):
        raise RuntimeError(f"associative_scan: reverse must be a bool, not {type(reverse)}")
    if combine_mode != "pointwise" and combine_mode != "generic":
        raise ValueError(f"associative_scan: combine_mode must be 'pointwise' or 'generic', not {combine_mode}")
    if not leaves:
        raise ValueError("associative_scan: xs has no tensor")
    if combine_mode == "pointwise":
        for x in leaves:
            if x.device.type != "cuda" and x.device.type != "xpu":
                raise ValueError("associative_scan: combine_mode='pointwise' needs CUDA or XPU tensors")
    ndim = leaves[0].dim()
    if dim < -max(ndim, 1) or dim >= max(ndim, 1):
        raise IndexError(f"associative_scan: dim {dim} out of range for {ndim} dimensions")
    if dim < 0:
        dim += max(ndim, 1)
    for x in leaves:
        if x.dim() <= dim or x.shape[dim] == 0:
            raise ValueError("associative_scan: every xs tensor needs dim and a non-empty scan dimension")
    leaves = [x.movedim(dim, 0) for x in leaves]
    if reverse:
        leaves = [x.flip(0) for x in leaves]

    def combine(left, right):
        if single:
            return [combine_fn(left[0], right[0])]
        return list(combine_fn(type(xs)(left), type(xs)(right)))

    out = _scan_leading(combine, leaves)
    if reverse:
        out = [x.flip(0) for x in out]
    out = [x.movedim(0, dim) for x in out]
    return out[0] if single else type(xs)(out)


def _scan_leading(combine, elems):
    """The inclusive scan along dim 0 of the tensors elems (one length).
    Every-other-row selections are a split of dim 0 into (rows, 2) and a
    pick of column 0 or 1, not a stepped slice: wick's autodiff takes the
    gradient of such views apart digit by digit (a step does not divide an
    odd length)."""
    n = elems[0].shape[0]
    if n < 2:
        return elems
    m = n // 2

    def column(e, start, rows, k):  # rows start+2i+k, i < rows
        return e[start:start + 2 * rows].reshape(rows, 2, *e.shape[1:])[:, k]

    # position 2k+1 of the pairs' scan is pairs 0..k combined: the odd positions
    odd = _scan_leading(combine, combine([column(e, 0, m, 0) for e in elems], [column(e, 0, m, 1) for e in elems]))
    # the even positions after the first: 2, 4, ... (m - 1 of them for even n, m for odd)
    if n % 2 == 0:
        evens = combine([o[:-1] for o in odd], [column(e, 2, m - 1, 0) for e in elems])
    else:
        evens = combine(odd, [column(e, 1, m, 1) for e in elems])
    evens = [torch.cat([e[0:1], v]) for e, v in zip(elems, evens)]
    return [_interleave(a, b) for a, b in zip(evens, odd)]


def _interleave(a, b):
    """a[0], b[0], a[1], b[1], ... along dim 0; a has as many rows as b or one more."""
    if a.shape[0] == b.shape[0]:
        return torch.stack([a, b], dim=1).flatten(0, 1)
    return torch.cat([torch.stack([a[:-1], b], dim=1).flatten(0, 1), a[-1:]])
