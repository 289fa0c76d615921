"""Implementations of the newer kinds, written here from their definitions (not the built-ins): cross-entropy and
its gradient f(logits, target[, g], **options), attention with its lse f(q, k, v, mask=None) -> (o, lse), and
split-KV merges f(outputs, lses) -> (o, lse). Sound ones compute in float64 and round once; defects carry a
reported bug."""

import math

import numpy as np

from ._util import f64, guarded_max, keep_of, safe_divide

# -- cross_entropy ------------------------------------------------------------------------------------------------


def _loss_rows(x, target, ignore_index, label_smoothing, z_loss, softcap):
    """Per-row losses in float64: (max - x_y) + log1p(others), smoothing and z-loss (every term >= 0)."""
    x = x.astype(np.float64)
    if softcap is not None:
        x = np.where(x == -np.inf, x, softcap * np.tanh(x / softcap))
    ignored = target == ignore_index
    y = np.where(ignored, 0, target)
    rows = np.arange(len(x))
    top = np.argmax(x, axis=1)
    m = x[rows, top]
    e = np.exp(x - m[:, None])
    e[rows, top] = 0
    l1p = np.log1p(e.sum(axis=1))
    loss = (1 - label_smoothing) * (m - x[rows, y]) + l1p
    if label_smoothing:  # (0 x the inf of a -inf lane would be NaN)
        loss = loss + label_smoothing * (m[:, None] - x).mean(axis=1)
    loss = loss + z_loss * (m + l1p) ** 2
    return np.where(ignored, 0.0, loss), ignored


def ce_float64_once(
    logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """Sound: the loss in float64, rounded once."""
    loss, ignored = _loss_rows(logits, target, ignore_index, label_smoothing, z_loss, softcap)
    if reduction == "sum":
        return np.array(loss.sum(), logits.dtype)
    if reduction == "mean":
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.array(loss.sum() / (~ignored).sum(), logits.dtype)
    return loss.astype(logits.dtype)


def ce_unshifted(logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"):
    """Defect (MLX PR #4188): log(sum(exp(x))) - x_y with no max shift, in float32 at best: exp overflows."""
    x = logits.astype(np.float32)
    with np.errstate(all="ignore"):
        lse = np.log(np.exp(x).sum(axis=1))
        loss = lse - x[np.arange(len(x)), np.where(target == ignore_index, 0, target)]
        loss = np.where(target == ignore_index, 0, loss)
    return loss.astype(logits.dtype) if reduction == "none" else np.array(loss.mean(), logits.dtype)


def ce_z_loss_when_off(logits, target, *, z_loss=0.0, **options):
    """Defect (OLMo-core PR #702): a z-loss of 1e-4 lse**2 added when z_loss is 0."""
    return ce_float64_once(logits, target, z_loss=z_loss or 1e-4, **options)


def ceg_float64_once(
    logits, target, g, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """Sound: p - q in float64 with 1 - p_y as the others' sum, times g (/ n for a mean), rounded once."""
    x = logits.astype(np.float64)
    ignored = target == ignore_index
    y = np.where(ignored, 0, target)
    rows = np.arange(len(x))
    z = x if softcap is None else np.where(x == -np.inf, x, softcap * np.tanh(x / softcap))
    m = z.max(axis=1, keepdims=True)
    e = np.exp(z - m)
    s = e.sum(axis=1, keepdims=True)
    p = e / s
    lse = (m + np.log(s))[:, 0]
    others = np.where(np.arange(x.shape[1])[None, :] == y[:, None], 0.0, p).sum(axis=1)
    v = x.shape[1]
    a = (1 + 2 * z_loss * lse)[:, None] * p - label_smoothing / v
    a[rows, y] = -others + 2 * z_loss * lse * p[rows, y] + label_smoothing * (v - 1) / v
    if softcap is not None:
        a = a * np.where(x == -np.inf, 0.0, 1 / np.cosh(x / softcap) ** 2)
    g = np.asarray(g, np.float64)
    w = (
        g
        if reduction == "none"
        else np.full(len(x), float(g) / (max((~ignored).sum(), 1) if reduction == "mean" else 1))
    )
    return np.where(ignored[:, None], 0.0, a * w[:, None]).astype(logits.dtype)


def ceg_p_in_dtype(logits, target, g, **options):
    """Defect (Liger-Kernel PR #1329): p rounded to the dtype before 1 is subtracted at the target."""
    x = logits.astype(np.float64)
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p = (p / p.sum(axis=1, keepdims=True)).astype(logits.dtype).astype(np.float64)
    rows = np.arange(len(x))
    p[rows, target] -= 1
    return (p * np.asarray(g, np.float64)[:, None]).astype(logits.dtype)


def ce_softcap_every_lane(logits, target, **options):
    """Defect (Liger-Kernel 0.8.5's cross-entropy): the softcap applied to every lane, -inf ones becoming -c and
    taking probability; in float64, rounded once."""
    softcap = options.pop("softcap", None)
    if softcap is not None:
        logits = (softcap * np.tanh(logits.astype(np.float64) / softcap)).astype(logits.dtype)
    return ce_float64_once(logits, target, **options)


def ceg_softcap_every_lane(logits, target, g, *, softcap=None, **options):
    """Defect (the same, in the backward): p over every lane capped, -inf ones at -c; the cap's derivative is 0 on
    them (tanh is -1 there), so the leak shows as the kept lanes' p too small."""
    if softcap is None:
        return ceg_float64_once(logits, target, g, **options)
    x = logits.astype(np.float64)
    z = softcap * np.tanh(x / softcap)
    rows = np.arange(len(x))
    ignore_index = options.get("ignore_index", -100)
    ignored = target == ignore_index
    y = np.where(ignored, 0, target)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p = p / p.sum(axis=1, keepdims=True)
    p[rows, y] -= 1
    dz = p * np.where(x == -np.inf, 0.0, 1 / np.cosh(x / softcap) ** 2)
    reduction = options.get("reduction", "none")
    g = np.asarray(g, np.float64)
    kept = max(int((~ignored).sum()), 1)
    w = g if reduction == "none" else np.full(len(x), float(g) / (kept if reduction == "mean" else 1))
    return np.where(ignored[:, None], 0.0, dz * w[:, None]).astype(logits.dtype)


# -- attention with its lse -------------------------------------------------------------------------------------------


def lse_float64_once(q, k, v, mask=None):
    """Sound: scores, softmax, P V and lse in float64, rounded once; a query with no key: o = 0, lse = -inf."""
    q64, k64, v64 = f64(q, k, v)
    s = q64 @ np.swapaxes(k64, -1, -2) / math.sqrt(q.shape[-1])
    keep = keep_of(mask, s.shape)
    t = np.where(keep, s, -np.inf)
    m = guarded_max(t)
    e = np.where(keep, np.exp(t - m), 0)
    total = e.sum(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        lse = (m + np.log(total))[..., 0]
    return (safe_divide(e, total) @ v64).astype(q.dtype), lse.astype(q.dtype)


def lse_plus_inf_for_no_key(q, k, v, mask=None):
    """Defect (FlashAttention PR #978): a query with no key gets lse = +inf."""
    o, lse = lse_float64_once(q, k, v, mask)
    return o, np.where(lse == -np.inf, np.array(np.inf, lse.dtype), lse)


# -- split-KV merges ----------------------------------------------------------------------------------------------


def merge_float64_once(outputs, lses):
    """Sound: the merge in float64 with empty splits guarded, rounded once."""
    o, lse = f64(outputs, lses)
    kept = lse != -np.inf
    m = np.where(kept.any(axis=0), np.where(kept, lse, -np.inf).max(axis=0), 0.0)
    w = np.where(kept, np.exp(np.where(kept, lse, 0.0) - m), 0.0)
    total = w.sum(axis=0)
    merged = (w[..., None] * np.where(kept[..., None], o, 0.0)).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total[..., None] > 0, merged / np.where(total > 0, total, 1)[..., None], 0.0)
        merged_lse = np.where(total > 0, m + np.log(np.where(total > 0, total, 1)), -np.inf)
    return out.astype(outputs.dtype), merged_lse.astype(outputs.dtype)


def merge_unguarded(outputs, lses):
    """Defect (vLLM PR #39148): no guard: every split empty gives -inf - -inf = NaN."""
    o, lse = f64(outputs, lses)
    with np.errstate(all="ignore"):
        m = lse.max(axis=0)
        w = np.exp(lse - m)
        total = w.sum(axis=0)
        return ((w[..., None] * o).sum(axis=0) / total[..., None]).astype(outputs.dtype), (m + np.log(total)).astype(
            outputs.dtype
        )
