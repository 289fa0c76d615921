"""Built-in cross-entropy candidates: f(logits, target, *, ignore_index, label_smoothing, z_loss, softcap,
reduction) -> loss, each in the audited dtype unless its name says otherwise ("in the dtype" as in `softmax`).

Each takes every option of the kind (softaudit.kinds.cross_entropy): ignored rows give 0 and are left out of a
mean; label smoothing eps gives (1 - eps) (lse - x_y) + eps mean_j (lse - x_j); z_loss adds zl lse**2 per row;
softcap replaces each finite logit x by c tanh(x / c) first (a -inf lane stays -inf).
"""

from __future__ import annotations

import numpy as np

from ..adapters import candidate
from ._ops import dtype_sum, exp, log, log1p, row_max, work_dtype


def tanh(a):
    """tanh in a's dtype from the portable exp: sign(a) (1 - 2 / (e**(2|a|) + 1)), each step rounded."""
    one = np.array(1, a.dtype)
    return np.sign(a) * (one - np.array(2, a.dtype) / (exp(np.abs(a) * np.array(2, a.dtype)) + one))


def capped(x, softcap):
    """The finite logits as c tanh(x / c) in x's dtype (-inf lanes stay -inf); x itself without a softcap."""
    if softcap is None:
        return x
    c = np.array(softcap, x.dtype)
    return np.where(x == -np.inf, x, c * tanh(x / c))


def reduce(loss, ignored, reduction):
    """Ignored rows 0; a mean over the rows not ignored (pairwise in loss's dtype), a sum, or the losses."""
    loss = np.where(ignored, np.zeros((), loss.dtype), loss)
    if reduction == "none":
        return loss
    total = dtype_sum(loss)[0]
    if reduction == "sum":
        return total
    return total / np.array(int(np.count_nonzero(~ignored)), loss.dtype)


def targets(x, target, ignore_index):
    """The rows ignored, and each row's target (0 where ignored)."""
    target = np.asarray(target)
    ignored = target == ignore_index
    return ignored, np.where(ignored, 0, target)


def from_log_softmax(logp, lse, y, label_smoothing, z_loss):
    """Row losses from log p and lse in their dtype: -(1 - eps) logp_y - eps mean(logp) (+ zl lse**2)."""
    d = logp.dtype
    rows = np.arange(len(logp))
    loss = -logp[rows, y]
    if label_smoothing:
        eps = np.array(label_smoothing, d)
        mean = dtype_sum(logp)[:, 0] / np.array(logp.shape[1], d)
        loss = (np.array(1, d) - eps) * loss - eps * mean
    if z_loss:
        loss = loss + np.array(z_loss, d) * lse * lse
    return loss


@candidate(kind="cross_entropy", name="cross_entropy.log_softmax_gather")
def log_softmax_gather(
    logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """log_softmax (x - max - log(sum exp(x - max))) in the dtype, then the target's entry gathered, as model code
    does with F.log_softmax and F.nll_loss. Weakness: when the target dominates, the sum rounds to 1 and the loss,
    1 - p_y, comes out 0 or one ulp of 1 (log of a sum near 1 cancels); in float16, label smoothing's sum of V
    log-probabilities (32,003 of about -10) overflows to -inf and the loss to inf."""
    ignored, y = targets(logits, target, ignore_index)
    with np.errstate(all="ignore"):
        x = capped(logits, softcap)
        m = row_max(x)
        log_s = log(dtype_sum(exp(x - m)))
        logp = (x - m) - log_s
        loss = from_log_softmax(logp, (m + log_s)[:, 0], y, label_smoothing, z_loss)
        return reduce(loss, ignored, reduction)


@candidate(kind="cross_entropy", name="cross_entropy.lse_minus_target")
def lse_minus_target(
    logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """lse = max + log(sum exp(x - max)) rounded to the dtype, then lse - x_y in the dtype, as a kernel that keeps
    lse for its backward computes the loss (FlashAttention's and the fused cross-entropy kernels' form). Weakness:
    lse's rounding, u |lse|, is all of a confident row's loss (1 - p_y) when lse - x_y cancels."""
    ignored, y = targets(logits, target, ignore_index)
    with np.errstate(all="ignore"):
        x = capped(logits, softcap)
        m = row_max(x)
        lse = m + log(dtype_sum(exp(x - m)))
        loss = from_log_softmax(x - lse, lse[:, 0], y, label_smoothing, z_loss)
        return reduce(loss, ignored, reduction)


@candidate(kind="cross_entropy", name="cross_entropy.naive")
def naive(logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"):
    """log(sum exp(x)) - x_y with no max shift, in the dtype (MLX PR #4188). Weakness: exp overflows once a logit
    passes log(max) (11.1 in float16, 88.7 in float32), and every exp underflows for very negative logits."""
    ignored, y = targets(logits, target, ignore_index)
    with np.errstate(all="ignore"):
        x = capped(logits, softcap)
        lse = log(dtype_sum(exp(x)))
        loss = from_log_softmax(x - lse, lse[:, 0], y, label_smoothing, z_loss)
        return reduce(loss, ignored, reduction)


@candidate(kind="cross_entropy", name="cross_entropy.chunked_b4096")
def chunked_b4096(
    logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"
):
    """The fused kernels' form (Liger-Kernel, Cut Cross-Entropy): the vocabulary in blocks of 4096 with an online
    max and sum (Milakov & Gimelshein 2018) in float32 for 16-bit dtypes, the loss lse - x_y rounded once.
    Weakness: lse - x_y cancels when the target dominates (log of a sum near 1), as log_softmax_gather does, only
    in float32; the smoothing's mean is a float32 sum of the logits."""
    ignored, y = targets(logits, target, ignore_index)
    w = work_dtype(logits.dtype)
    with np.errstate(all="ignore"):
        x = capped(logits.astype(w), softcap)
        n, v = x.shape
        m = np.full((n, 1), -np.inf, w)
        s = np.zeros((n, 1), w)
        total = np.zeros((n, 1), w)
        for start in range(0, v, 4096):
            block = x[:, start : start + 4096]
            new = np.maximum(m, row_max(block))
            safe = np.where(new == -np.inf, np.zeros((), w), new)
            s = s * exp(m - safe) + dtype_sum(exp(block - safe))
            total = total + dtype_sum(block)
            m = new
        lse = (m + log(s))[:, 0]
        loss = lse - x[np.arange(n), y]
        if label_smoothing:
            eps = np.array(label_smoothing, w)
            loss = (np.array(1, w) - eps) * loss + eps * (lse - total[:, 0] / np.array(v, w))
        if z_loss:
            loss = loss + np.array(z_loss, w) * lse * lse
        return reduce(loss.astype(logits.dtype), ignored, reduction)


@candidate(kind="cross_entropy", name="cross_entropy.f32acc")
def f32acc(logits, target, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"):
    """Best practice: (max - x_y) + log1p(sum of the others' exp(x - max)) in float32 for 16-bit dtypes (the dtype
    itself otherwise), every term >= 0, so nothing cancels; the loss rounded once. Weakness: none known beyond the
    conditioning (a softcap's tanh and a mean's sum are float32 roundings)."""
    ignored, y = targets(logits, target, ignore_index)
    w = work_dtype(logits.dtype)
    with np.errstate(all="ignore"):
        x = capped(logits.astype(w), softcap)
        n, v = x.shape
        rows = np.arange(n)
        top = np.argmax(np.where(np.isnan(x), -np.inf, x), axis=1)
        m = x[rows, top][:, None]
        e = exp(x - m)
        e[rows, top] = 0
        l1p = log1p(dtype_sum(e))[:, 0]
        d = m[:, 0] - x[rows, y]
        loss = d + l1p
        if label_smoothing:
            # eps mean_j (m - x_j), each term divided by V before the sum (a sum of the spans overflows for logits
            # near the dtype's largest), a span past it as m / V - x_j / V; with eps = 1 the target's own term is 0,
            # even where d is inf (a -inf target: the loss is inf, not 0 x inf)
            eps, n_v = np.array(label_smoothing, w), np.array(v, w)
            span = m - x
            terms = np.where(np.isinf(span) & np.isfinite(x), m / n_v - x / n_v, span / n_v)
            smooth = eps * dtype_sum(terms)[:, 0] + l1p
            loss = smooth if label_smoothing == 1 else (np.array(1, w) - eps) * d + smooth
        if z_loss:
            lse = m[:, 0] + l1p
            loss = loss + np.array(z_loss, w) * lse * lse
        loss = np.where(ignored, np.zeros((), w), loss)
        if reduction != "none":
            return reduce(loss, ignored, reduction).astype(logits.dtype)
        return loss.astype(logits.dtype)
