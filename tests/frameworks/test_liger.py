"""softaudit.frameworks.liger: Liger-Kernel's cross-entropy, fused linear cross-entropy and softmax, forward and
backward, every option, called through the adapter as an audit calls them (on this CPU in Triton's interpreter),
against float64 torch computed here; and an old release (0.5, SOFTAUDIT_OLD_LIGER: a folder holding its unpacked
wheel) in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
pytest.importorskip("liger_kernel")

from softaudit.adapters import CandidateSkip, load_target  # noqa: E402
from softaudit.adapters._call import call_all  # noqa: E402

from ._linear_exact import exact_linear  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def liger():
    return {c.name: c for c in load_target("softaudit.frameworks.liger")}


def _exact_loss(x, t, *, ignore_index=-100, label_smoothing=0.0, z_loss=0.0, softcap=None, reduction="none"):
    """float64 torch, written out: softcap on the finite logits, smoothing, z_loss lse**2, mean over kept rows."""
    z = torch.from_numpy(x).double()
    if softcap is not None:
        z = torch.where(torch.isfinite(z), softcap * torch.tanh(z / softcap), z)
    target = torch.from_numpy(t)
    kept = target != ignore_index
    logp = z.log_softmax(-1)
    lse = z.logsumexp(-1)
    y = torch.where(kept, target, 0)
    nll = -logp.gather(1, y[:, None])[:, 0]
    smooth = -logp.mean(-1)
    loss = (1 - label_smoothing) * nll + label_smoothing * smooth + z_loss * lse**2
    loss = torch.where(kept, loss, 0.0)
    if reduction == "none":
        return loss
    return loss.sum() if reduction == "sum" else loss.sum() / kept.sum()


OPTIONS = [
    {},
    {"reduction": "mean"},
    {"reduction": "sum", "label_smoothing": 0.1},
    {"z_loss": 1e-4},
    {"softcap": 5.0, "reduction": "mean"},
    {"ignore_index": -100, "reduction": "mean", "label_smoothing": 0.1},
]


def _case(v=1024, rows=4, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, v)) * 2).astype(np.float32)
    t = rng.integers(0, v, rows)
    t[1] = -100
    return x, t


@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_cross_entropy_forward_takes_every_option(liger, options):
    x, t = _case()  # (a vocabulary of whole blocks: no padded lanes, which the softcap leak test is about)
    reduced = options.get("reduction", "none") != "none"
    shape = (1,) if reduced else (len(x),)
    (got,), note = call_all(
        liger["liger.cross_entropy"], {"logits": x, "target": t}, None, (shape,), x.dtype, 60, options=options
    )
    assert "ran in Triton's interpreter" in note
    exact = _exact_loss(x, t, **options).reshape(shape).numpy()
    np.testing.assert_allclose(got, exact, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("g", [1.0, 2.0**-10, 65536.0, 0.3])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_backward_scales_by_g_when_g_is_not_one(liger, g, reduction):
    x, t = _case(seed=1)
    options = {"reduction": reduction, "label_smoothing": 0.1}
    args = {"logits": x, "target": t, "g": np.array(g)}
    (got,), _ = call_all(liger["liger.cross_entropy_grad"], args, None, (x.shape,), x.dtype, 60, options=options)
    leaf = torch.from_numpy(x).double().requires_grad_(True)
    z = leaf.clone()
    # (the same formula as _exact_loss, through autograd in float64)
    target = torch.from_numpy(t)
    kept = target != -100
    logp = z.log_softmax(-1)
    loss = 0.9 * -logp.gather(1, torch.where(kept, target, 0)[:, None])[:, 0] - 0.1 * logp.mean(-1)
    loss = torch.where(kept, loss, 0.0).sum()
    (loss / (kept.sum() if reduction == "mean" else 1) * g).backward()
    np.testing.assert_allclose(got, leaf.grad.numpy(), rtol=1e-5, atol=1e-6 * g)


def test_cross_entropy_backward_per_row_g(liger):
    x, t = _case(seed=2)
    g = np.array([0.5, 2.0, -1.0, 3.0])
    (got,), _ = call_all(
        liger["liger.cross_entropy_grad"], {"logits": x, "target": t, "g": g}, None, (x.shape,), x.dtype, 60
    )
    p = torch.from_numpy(x).double().softmax(-1)
    onehot = torch.nn.functional.one_hot(torch.from_numpy(np.where(t == -100, 0, t)), x.shape[1]).double()
    expected = ((p - onehot) * torch.from_numpy(g)[:, None]).numpy()
    expected[t == -100] = 0
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_softmax_forward_and_backward(liger, dtype):
    import ml_dtypes

    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 200)) * 3).astype(getattr(ml_dtypes, dtype) if dtype == "bfloat16" else dtype)
    g = rng.standard_normal((3, 200)).astype(x.dtype)
    (y,), _ = call_all(liger["liger.softmax"], {"x": x}, None, (x.shape,), x.dtype, 60)
    (dx,), _ = call_all(liger["liger.softmax_grad"], {"x": x, "g": g}, None, (x.shape,), x.dtype, 60)
    xd = torch.from_numpy(x.astype(np.float64)).requires_grad_(True)
    p = xd.softmax(-1)
    p.backward(torch.from_numpy(g.astype(np.float64)))
    tol = 1e-6 if dtype == "float32" else 2**-7
    np.testing.assert_allclose(y.astype(np.float64), p.detach().numpy(), rtol=tol, atol=tol * 1e-3)
    np.testing.assert_allclose(dx.astype(np.float64), xd.grad.numpy(), rtol=8 * tol, atol=8 * tol * 1e-2)


def _linear_case(v=96, h=16, rows=4, seed=4):
    """x (rows, H), W (V, H) with logits about N(0, 4), a bias, targets with row 1 ignored (float32)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, h)).astype(np.float32)
    w = (rng.standard_normal((v, h)) * (2 / np.sqrt(h))).astype(np.float32)
    b = rng.standard_normal(v).astype(np.float32)
    t = rng.integers(0, v, rows)
    t[1] = -100
    return x, w, b, t


LINEAR_OPTIONS = [
    {},
    {"reduction": "mean"},
    {"reduction": "sum", "label_smoothing": 0.1},
    {"z_loss": 1e-4, "reduction": "mean"},
    {"softcap": 5.0},
    {"ignore_index": 3, "reduction": "mean", "label_smoothing": 0.1},
]


@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("options", LINEAR_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_fused_linear_cross_entropy_forward_takes_every_option(liger, options, bias):
    x, w, b, t = _linear_case()
    if options.get("ignore_index") == 3:
        t[t == -100] = 3
    arrays = {"x": x, "weight": w, "target": t} | ({"bias": b} if bias else {})
    reduced = options.get("reduction", "none") != "none"
    shape = (1,) if reduced else (len(x),)
    (got,), note = call_all(
        liger["liger.fused_linear_cross_entropy"], arrays, None, (shape,), x.dtype, 60, options=options
    )
    assert "ran in Triton's interpreter" in note
    exact = exact_linear(x, w, b if bias else np.zeros_like(b), t, **options).reshape(shape)
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", LINEAR_OPTIONS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "plain")
def test_fused_linear_cross_entropy_backward_gives_dx_dweight_dbias(liger, options):
    """(dx, dweight, dbias) against float64 autograd, with a g per row for reduction='none' and a g that is not 1
    for a mean or sum (the scaling Liger's backward does only then); dbias at the zero bias for a case without one."""
    x, w, b, t = _linear_case(seed=5)
    if options.get("ignore_index") == 3:
        t[t == -100] = 3
    reduced = options.get("reduction", "none") != "none"
    g = np.array(0.375) if reduced else np.array([0.5, 2.0, -1.0, 3.0])
    arrays = {"x": x, "weight": w, "target": t, "g": g}
    shapes = (x.shape, w.shape, b.shape)
    got, _ = call_all(
        liger["liger.fused_linear_cross_entropy_grad"], arrays, None, shapes, x.dtype, 60, options=options
    )
    for found, exact in zip(got, exact_linear(x, w, np.zeros_like(b), t, g, **options)):
        np.testing.assert_allclose(found, exact, rtol=1e-4, atol=1e-6)


def test_float32_accumulation_is_a_gpus_path_and_skips_on_a_cpu(liger):
    """accum_dtype=float32 accumulates dweight in float32 only on a GPU (Liger's CPU fallback rounds each chunk's
    product to the inputs' dtype first): on a CPU its rows skip, saying why."""
    x, w, b, t = _linear_case()
    arrays = {"x": x, "weight": w, "target": t, "g": np.ones(4)}
    with pytest.raises(CandidateSkip, match="accum_dtype=float32 path is a GPU's"):
        call_all(
            liger["liger.fused_linear_cross_entropy_grad_f32acc"],
            arrays,
            None,
            (x.shape, w.shape, b.shape),
            x.dtype,
            60,
        )


def test_fused_linear_cross_entropy_backward_with_a_bias(liger):
    x, w, b, t = _linear_case(seed=6)
    arrays = {"x": x, "weight": w, "target": t, "g": np.array(2.0), "bias": b}
    options = {"reduction": "sum"}
    got, _ = call_all(
        liger["liger.fused_linear_cross_entropy_grad"],
        arrays,
        None,
        (x.shape, w.shape, b.shape),
        x.dtype,
        60,
        options=options,
    )
    for found, exact in zip(got, exact_linear(x, w, b, t, 2.0, **options)):
        np.testing.assert_allclose(found, exact, rtol=1e-4, atol=1e-6)


def test_a_missing_option_is_a_skip_naming_the_release(liger, monkeypatch):
    from softaudit.frameworks import liger as module

    monkeypatch.setattr(module, "_function", lambda name: None)
    with pytest.raises(CandidateSkip, match=r"liger-kernel \S+ has no LigerSoftmaxFunction"):
        module.softmax(torch.zeros(2, 3))


OLD = os.environ.get("SOFTAUDIT_OLD_LIGER")


@pytest.mark.skipif(not OLD, reason="SOFTAUDIT_OLD_LIGER (an unpacked liger-kernel 0.5 wheel) is not set")
def test_an_old_release_audits_its_cross_entropy_and_skips_the_softmax_it_lacks(tmp_path):
    script = """
import softaudit
from softaudit.frameworks import liger
assert liger.version().startswith("0.5"), liger.version()
t = softaudit.audit("softaudit.frameworks.liger", dtypes=["float32"], suite="quick",
                    families=["ce_gaussian", "ce_ignored", "gaussian"], cache=False).table
by = {(r.candidate, r.family): r for r in t.itertuples()}
assert {r.verdict for r in t.itertuples() if r.candidate.startswith("liger.softmax")} == {"skip"}
assert all("0.5" in r.note and "LigerSoftmaxFunction" in r.note
           for r in t.itertuples() if r.candidate.startswith("liger.softmax"))
assert by["liger.cross_entropy", "ce_gaussian"].verdict == "pass"
# 0.5's backward scales every row by g[0] under reduction="none" (its element_mul kernel reads one g; 0.8.5
# scales each row by its own)
assert by["liger.cross_entropy_grad", "ce_gaussian"].verdict == "fail"
# the fused linear cross-entropy: 0.5 sums the rows whatever the reduction (a skip for reduction='none'), and has
# no accum_dtype; a mean (lce_chunks) it computes
f = softaudit.audit(["softaudit.frameworks.liger:fused_linear_cross_entropy",
                     "softaudit.frameworks.liger:fused_linear_cross_entropy_grad",
                     "softaudit.frameworks.liger:fused_linear_cross_entropy_grad_f32acc"],
                    dtypes=["float32"], suite="quick", families=["lce_gaussian", "lce_chunks"], cache=False).table
rows = {(r.candidate, r.family): r for r in f.itertuples()}
assert rows["liger.fused_linear_cross_entropy", "lce_gaussian"].verdict == "skip"
assert "0.5" in rows["liger.fused_linear_cross_entropy", "lce_gaussian"].note
assert "takes no reduction='none'" in rows["liger.fused_linear_cross_entropy", "lce_gaussian"].note
assert rows["liger.fused_linear_cross_entropy", "lce_chunks"].verdict == "pass"
assert rows["liger.fused_linear_cross_entropy_grad", "lce_chunks"].verdict == "pass"
assert {r.verdict for r in f.itertuples() if r.candidate.endswith("_f32acc")} == {"skip"}
assert all("accum_dtype" in r.note for r in f.itertuples() if r.candidate.endswith("_f32acc"))
print(t[["candidate", "family", "verdict", "note"]].to_string())
print(f[["candidate", "family", "output", "verdict", "note"]].to_string())
"""
    env = os.environ | {"PYTHONPATH": os.pathsep.join([OLD, str(ROOT)])}
    run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
