"""Accuracy by the rules of PyTorch's compiler benchmarks.

The rules (as in benchmarks/dynamo/common.py check_accuracy and
torch._dynamo.utils.same; written here from their description, not copied):

* a float64 reference run (model and floating inputs cast to float64);
* two eager runs that must agree (tolerance 0) before anything is judged;
* the compiled result must be allclose to eager with atol = rtol = tol
  (1e-3 inference, 1e-2 training); where it is not, it still passes when its
  RMSE against the float64 reference is within ``multiplier`` times eager's
  RMSE against that reference plus tol/10. The multiplier is 2, or 3 for
  half-precision results, small tensors (< 1000 elements) and tol >= 2e-2;
* without a float64 reference, cosine similarity >= 0.99 decides;
* dtypes must match exactly; bool and integer tensors compare exactly.

``compare`` returns (ok, info) where info names the first leaf that failed.
"""
from __future__ import annotations

import math
from collections.abc import Mapping

import torch

HALF_DTYPES = (torch.float16, torch.bfloat16)


def normalize(out):
    """Turn a model's output into plain lists/dicts/tensors (ModelOutput, namedtuples...).

    Objects that are not tensors, numbers or containers (caches, configs) are dropped
    from comparison, as they carry no numerical result of their own.
    """
    if isinstance(out, torch.Tensor):
        return out.detach().clone()  # CUDA-graph outputs are overwritten by the next replay
    if isinstance(out, (bool, int, float, str)) or out is None:
        return out
    if isinstance(out, Mapping):
        return {str(k): normalize(v) for k, v in out.items() if _keep(v)}
    if isinstance(out, (list, tuple)):
        return [normalize(v) for v in out if _keep(v)]
    return None


def _keep(v):
    return isinstance(v, (torch.Tensor, bool, int, float, str, Mapping, list, tuple)) or v is None


def to_float64(obj):
    if isinstance(obj, torch.Tensor):
        return obj.to(torch.float64) if obj.is_floating_point() else obj
    if isinstance(obj, dict):
        return {k: to_float64(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_float64(v) for v in obj]
    return obj


def rmse(ref: torch.Tensor, res: torch.Tensor) -> float:
    d = ref.to(torch.float64) - res.to(torch.float64)
    if d.numel() == 0:
        return 0.0
    return float(torch.sqrt(torch.mean(d * d)))


def _multiplier(res: torch.Tensor, fp64_ref: torch.Tensor, tol: float) -> float:
    m = 3.0 if res.dtype in HALF_DTYPES else 2.0
    if fp64_ref.numel() < 1000 or tol >= 2e-2:
        m = 3.0
    return m


class _Failure(Exception):
    pass


def _compare_tensor(path, ref, res, fp64_ref, tol, cosine, info):
    if not isinstance(res, torch.Tensor):
        raise _Failure(f"{path}: expected a tensor, got {type(res).__name__}")
    if ref.dtype != res.dtype:
        raise _Failure(f"{path}: dtype mismatch {ref.dtype} vs {res.dtype}")
    if ref.shape != res.shape:
        raise _Failure(f"{path}: shape mismatch {tuple(ref.shape)} vs {tuple(res.shape)}")
    ref = ref.detach().cpu()
    res = res.detach().cpu()
    info["leaves"] += 1
    if not ref.is_floating_point() and not ref.is_complex():
        if not torch.equal(ref, res):
            raise _Failure(f"{path}: {ref.dtype} values differ")
        return
    if ref.numel():
        err = float((ref.to(torch.float64) - res.to(torch.float64)).abs().nan_to_num(float("inf")).max())
        info["max_abs_err"] = max(info["max_abs_err"], err)
    if cosine:
        a, b = ref.flatten().float(), res.flatten().float()
        if torch.allclose(a, b, atol=tol, rtol=tol, equal_nan=True):
            return
        score = float(torch.nn.functional.cosine_similarity(a, b, dim=0, eps=1e-6))
        if score < 0.99:
            raise _Failure(f"{path}: cosine similarity {score:.4f} < 0.99")
        return
    if torch.allclose(ref, res, atol=tol, rtol=tol):
        return
    if fp64_ref is None or not isinstance(fp64_ref, torch.Tensor) or fp64_ref.dtype != torch.float64:
        raise _Failure(f"{path}: not allclose at tol {tol:g} (max abs err {info['max_abs_err']:.3g}), no fp64 reference")
    fp64_ref = fp64_ref.detach().cpu()
    # Compiled is better than eager: eager has NaNs the fp64 reference and compiled have not.
    if (not fp64_ref.isnan().any() and not res.isnan().any() and ref.isnan().any()
            and torch.allclose(fp64_ref.to(res.dtype), res, atol=4e-2, rtol=4e-2)):
        return
    ref_err = rmse(fp64_ref, ref)
    res_err = rmse(fp64_ref, res)
    mult = _multiplier(res, fp64_ref, tol)
    info["rmse_eager"] = max(info.get("rmse_eager") or 0.0, ref_err)
    info["rmse_compiled"] = max(info.get("rmse_compiled") or 0.0, res_err)
    info["method"] = "rmse"
    if not (res_err <= mult * ref_err + tol / 10.0):
        raise _Failure(
            f"{path}: RMSE vs fp64 {res_err:.3g} > {mult:g} x eager's {ref_err:.3g} + {tol / 10:.1g}")


def _compare(path, ref, res, fp64_ref, tol, cosine, info):
    if isinstance(ref, float) and not isinstance(ref, bool):
        if not isinstance(res, (float, int)):
            raise _Failure(f"{path}: expected a float, got {type(res).__name__}")
        fp = torch.tensor(fp64_ref, dtype=torch.float64) if isinstance(fp64_ref, (float, int)) else None
        _compare_tensor(path, torch.tensor(ref), torch.tensor(float(res)), fp, tol, cosine, info)
        return
    if isinstance(ref, torch.Tensor):
        _compare_tensor(path, ref, res, fp64_ref, tol, cosine, info)
        return
    if isinstance(ref, dict):
        if not isinstance(res, dict) or set(ref) != set(res):
            raise _Failure(f"{path}: keys differ {sorted(ref)} vs {sorted(res) if isinstance(res, dict) else type(res).__name__}")
        for k in sorted(ref):
            sub = fp64_ref.get(k) if isinstance(fp64_ref, dict) else None
            _compare(f"{path}.{k}" if path else k, ref[k], res[k], sub, tol, cosine, info)
        return
    if isinstance(ref, list):
        if not isinstance(res, list) or len(ref) != len(res):
            raise _Failure(f"{path}: length differs")
        for i, (a, b) in enumerate(zip(ref, res)):
            sub = fp64_ref[i] if isinstance(fp64_ref, list) and i < len(fp64_ref) else None
            _compare(f"{path}[{i}]", a, b, sub, tol, cosine, info)
        return
    if ref != res:
        raise _Failure(f"{path}: {ref!r} != {res!r}")


def compare(ref, res, fp64_ref=None, tol=1e-3, cosine=False):
    """Judge ``res`` (compiled) against ``ref`` (eager), with ``fp64_ref`` for the RMSE rule.

    All three are normalized outputs (see ``normalize``). Returns (ok, info).
    """
    info = {"tol": tol, "method": "cosine" if cosine else "allclose", "leaves": 0,
            "max_abs_err": 0.0, "rmse_eager": None, "rmse_compiled": None, "error": None}
    try:
        _compare("output", ref, res, fp64_ref, tol, cosine, info)
    except _Failure as e:
        info["error"] = str(e)
        return False, info
    except RuntimeError as e:  # allclose on odd inputs can raise; count as a failure
        info["error"] = f"comparison raised: {e}"
        return False, info
    if math.isinf(info["max_abs_err"]):
        info["max_abs_err"] = None
    return True, info


def same_exact(a, b):
    """Two eager runs must agree exactly (PyTorch uses tol 0 off ROCm)."""
    ok, info = compare(a, b, None, tol=0.0)
    return ok, info
