"""FP8 attention: the exact reference against mpmath, and the verdicts the issue asks for: every sound scheme
passes, the stale max without its budget and the dropped descale fail with their causes named, and a P-in-e4m3
kernel passes under its declared scheme and fails when declared as P in bfloat16."""

import math

import ml_dtypes
import mpmath
import numpy as np
import pytest

from softaudit import fp8
from softaudit.candidates import attention_fp8 as kernels
from softaudit.reference import fp8 as _fp8

SOUND = [name for name, (_, _, sound) in kernels.BUILTINS.items() if sound]


def _bf16_nearest(x: mpmath.mpf) -> float:
    """Round an mpmath value to bfloat16 by comparing its bfloat16 neighbours exactly (ties to the even pattern)."""
    guess = np.array([float(x)]).astype(ml_dtypes.bfloat16)
    bits = guess.view(np.uint16)[0]
    near = [np.array([b], np.uint16).view(ml_dtypes.bfloat16)[0] for b in (bits - 1, bits, bits + 1)]
    best = min(near, key=lambda c: (abs(mpmath.mpf(float(c)) - x), int(np.array([c]).view(np.uint16)[0]) & 1))
    return float(best)


def test_the_reference_is_the_exact_attention_of_the_dequantized_inputs_rounded_once():
    rng = np.random.default_rng(5)
    b, hq, hk, lq, lk, d = 1, 2, 1, 3, 5, 4
    q8 = _fp8.to_fp8(rng.standard_normal((b, hq, lq, d)) * 50, "float8_e4m3fn")
    k8 = _fp8.to_fp8(rng.standard_normal((b, hk, lk, d)) * 50, "float8_e4m3fn")
    v8 = _fp8.to_fp8(rng.standard_normal((b, hk, lk, d)) * 5000, "float8_e5m2")
    dq, dk, dv = (np.array([[x]], np.float32) for x in (0.013, 0.021, 3.3e-4))
    ref, _ = _fp8.attention(q8, k8, v8, dq, dk, dv, dtype=ml_dtypes.bfloat16)
    with mpmath.workdps(60):
        for h in range(hq):
            for i in range(lq):
                qs = [mpmath.mpf(float(q8[0, h, i, c])) * mpmath.mpf(float(dq[0, 0])) for c in range(d)]
                s = []
                for j in range(lk):
                    kj = [mpmath.mpf(float(k8[0, 0, j, c])) * mpmath.mpf(float(dk[0, 0])) for c in range(d)]
                    s.append(mpmath.fsum(a * b for a, b in zip(qs, kj)) / mpmath.sqrt(d))
                m = max(s)
                w = [mpmath.exp(x - m) for x in s]
                total = mpmath.fsum(w)
                for c in range(d):
                    o = mpmath.fsum(w[j] * float(v8[0, 0, j, c]) * mpmath.mpf(float(dv[0, 0])) for j in range(lk))
                    assert float(ref.value[0, h, i, c]) == _bf16_nearest(o / total)


def test_gqa_reads_each_kv_heads_descale_for_its_query_heads():
    rng = np.random.default_rng(1)
    q8 = _fp8.to_fp8(rng.standard_normal((1, 4, 2, 8)), "float8_e4m3fn")
    k8 = _fp8.to_fp8(rng.standard_normal((1, 2, 6, 8)), "float8_e4m3fn")
    v8 = _fp8.to_fp8(rng.standard_normal((1, 2, 6, 8)), "float8_e4m3fn")
    dq, dk, dv = (np.array([[0.5, 8.0]], np.float32),) * 3
    ref, _ = _fp8.attention(q8, k8, v8, dq, dk, dv, dtype=np.float32)
    for h in range(4):
        kv = h // 2
        one, _ = _fp8.attention(
            q8[:, h : h + 1],
            k8[:, kv : kv + 1],
            v8[:, kv : kv + 1],
            dq[:, kv : kv + 1],
            dk[:, kv : kv + 1],
            dv[:, kv : kv + 1],
            dtype=np.float32,
        )
        assert np.array_equal(ref.value[:, h : h + 1], one.value)


@pytest.mark.parametrize("name", SOUND)
def test_every_sound_scheme_passes_under_its_declaration(name):
    f, scheme, _ = kernels.BUILTINS[name]
    table = fp8.audit_attention_fp8(f, scheme=scheme, name=name)
    assert list(table.verdict) == ["pass"] * len(fp8.ATTENTION_FAMILIES), table[["family", "verdict", "note"]]


def test_the_stale_max_without_its_budget_fails_with_its_cause():
    table = fp8.audit_attention_fp8(kernels.stale_max, scheme="fa3", families=["fp8_stale_max"])
    (row,) = table.itertuples()
    assert row.verdict == "fail" and row.cause == "stale_max"
    assert "FlashAttention #2716" in row.note and row.max_err > row.fail_above


def test_a_dropped_descale_fails_with_its_cause():
    table = fp8.audit_attention_fp8(kernels.dropped_descale, scheme="fa3", families=["fp8_heads", "fp8_gqa"])
    assert list(table.verdict) == ["fail", "fail"]
    assert list(table.cause) == ["dropped_descale"] * 2


def test_p_in_e4m3_passes_declared_as_such_and_fails_declared_as_p_in_bfloat16():
    families = ["fp8_heads", "fp8_repeated"]
    right = fp8.audit_attention_fp8(kernels.fa3, scheme="fa3", families=families)
    wrong = fp8.audit_attention_fp8(kernels.fa3, scheme="p_bf16", families=families)
    assert list(right.verdict) == ["pass", "pass"]
    assert list(wrong.verdict) == ["fail", "fail"]
    # the scheme explains all of the error under the right declaration, a fraction of it under the wrong one
    assert (right.standard_err >= right.max_err * 0.5).all()
    assert (wrong.standard_err * 4 < wrong.max_err).all()
    assert wrong.note[0].startswith("P in bfloat16 explains")


def test_an_undeclared_kernel_is_judged_against_p_in_float32_and_the_row_says_so():
    table = fp8.audit_attention_fp8(kernels.best_float32, families=["fp8_gqa"])
    assert table.verdict[0] == "pass" and table.scheme[0] == "P in float32"
    assert table.note[0].startswith("no scheme declared: judged against P in float32")
    marked = fp8.declare("fa3")(lambda *a, **k: kernels.fa3(*a))
    assert fp8.audit_attention_fp8(marked, families=["fp8_gqa"]).scheme[0] == "P in e4m3 with offset 8"


def test_an_independently_written_stale_max_kernel_gets_the_cause():
    """FlashAttention #2716's loop written out plainly: blocks of 64 keys, the max refreshed only past +4."""

    def kernel(q8, k8, v8, dq, dk, dv, mask=None):
        q = q8.astype(np.float32) * np.asarray(dq, np.float32)[..., None, None]
        k = k8.astype(np.float32) * np.asarray(dk, np.float32)[..., None, None]
        v = v8.astype(np.float32)
        s = (q @ np.swapaxes(k, -1, -2)) * np.float32(math.log2(math.e) / math.sqrt(q.shape[-1]))
        m = s[..., :64].max(-1, keepdims=True)
        acc, total = 0, 0
        for j in range(0, s.shape[-1], 64):
            blk = s[..., j : j + 64]
            top = blk.max(-1, keepdims=True)
            new = np.where(top > m + 4, top, m)
            acc, total = acc * np.exp2(m - new), total * np.exp2(m - new)
            p = np.exp2(blk - new + 8).astype(np.float32)
            acc = acc + p.astype(ml_dtypes.float8_e4m3fn).astype(np.float32).clip(-448, 448) @ v[..., j : j + 64, :]
            # (ml_dtypes' cast gives NaN past 448: saturate first, as the hardware does)
            total = total + p.sum(-1, keepdims=True)
            m = new
        return (acc / total * np.asarray(dv, np.float32)[..., None, None]).astype(ml_dtypes.bfloat16)

    def saturating(q8, k8, v8, dq, dk, dv, mask=None):
        with np.errstate(all="ignore"):
            return kernel(q8, k8, v8, dq, dk, dv, mask)

    table = fp8.audit_attention_fp8(saturating, scheme="fa3", families=["fp8_stale_max"])
    assert table.verdict[0] == "fail" and table.cause[0] == "stale_max"


def test_a_scheme_mistake_is_one_line():
    with pytest.raises(ValueError, match="unknown scheme 'fa4'"):
        fp8.scheme_of("fa4")
    with pytest.raises(ValueError, match="puts P past float8_e4m3fn's largest value"):
        fp8.scheme_of({"p": "float8_e4m3fn", "offset": 9})


def test_a_kernel_that_raises_or_returns_the_wrong_shape_is_an_error_row():
    def transposed(*args):
        return np.swapaxes(kernels.fa3(*args), -1, -2)

    def raises(*args):
        raise RuntimeError("no FP8 here")

    table = fp8.audit_attention_fp8(transposed, scheme="fa3", families=["fp8_masks"])
    assert table.verdict[0] == "error" and "o must be bfloat16 of shape (1, 2, 128, 64)" in table.note[0]
    table = fp8.audit_attention_fp8(raises, scheme="fa3", families=["fp8_gqa"])
    assert table.verdict[0] == "error" and table.note[0] == "raised RuntimeError: no FP8 here"
