"""The linear cross-entropy that the Liger-Kernel and Cut Cross-Entropy tests compare with: float64 torch, written
out from the kind's definition, and its gradients by autograd."""

from __future__ import annotations

import numpy as np


def exact_linear(x, w, b, t, g=None, **options):
    """The loss of x W^T + b (softcap, ignore_index, label smoothing, z-loss, reduction as the kind takes them), and
    with g its (dx, dweight, dbias)."""
    import torch

    leaves = [torch.from_numpy(np.asarray(a, np.float64)).requires_grad_(True) for a in (x, w, b)]
    z = leaves[0] @ leaves[1].T + leaves[2]
    cap = options.get("softcap")
    if cap is not None:
        z = cap * torch.tanh(z / cap)
    ignore, smoothing = options.get("ignore_index", -100), options.get("label_smoothing", 0.0)
    target = torch.from_numpy(t)
    kept = target != ignore
    logp = z.log_softmax(-1)
    nll = -logp.gather(1, torch.where(kept, target, 0)[:, None])[:, 0]
    loss = (1 - smoothing) * nll - smoothing * logp.mean(-1) + options.get("z_loss", 0.0) * z.logsumexp(-1) ** 2
    loss = torch.where(kept, loss, 0.0)
    reduction = options.get("reduction", "none")
    if reduction != "none":
        loss = loss.sum() / (kept.sum() if reduction == "mean" else 1)
    if g is None:
        return loss.detach().numpy()
    loss.backward(torch.from_numpy(np.asarray(g, np.float64)).reshape(loss.shape))
    return [leaf.grad.numpy() for leaf in leaves]
