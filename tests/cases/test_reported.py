"""The reported-bug families (softaudit/cases/_reported.py): their references agree with the independent mpmath oracle
on a sample, their exact-answer probes give the exact answer, and the built-ins' verdicts show each bug."""

import math
import re

import numpy as np
import pytest

import softaudit
from softaudit.candidates import attention as attention_builtins
from softaudit.candidates import log_softmax as log_softmax_builtins
from softaudit.candidates import softmax as softmax_builtins
from softaudit.cases import FAMILIES, REPORTED
from softaudit.reference import format_of
from softaudit.runner import Prepared

from ..reference.oracle import attention_row, rounded, rounded_rows

DTYPES = ["float16", "bfloat16", "float32"]
ROW_KINDS = ["softmax", "log_softmax", "logsumexp", "masked_softmax"]
#: (equal_sum_overflow's 2**16-long row is checked against its closed form below, not the oracle.)
ROW_FAMILIES = [f for f in REPORTED if "softmax" in FAMILIES[f].kinds and f != "equal_sum_overflow"]
ATTENTION_FAMILIES = [f for f in REPORTED if "attention" in FAMILIES[f].kinds]


def prepared(family: str, kind: str, dtype: str) -> list[Prepared]:
    fmt = format_of(dtype)
    return [Prepared(case, fmt, i) for i, case in enumerate(FAMILIES[family].cases(kind, fmt, "default"))]


def audit(targets, family: str, dtype: str):
    table = softaudit.audit(targets, dtypes=[dtype], families=[family], isolation="none", cache=False).table
    return table.set_index("candidate")


def test_every_reported_family_names_its_source_and_runs_somewhere():
    for name in REPORTED:
        family = FAMILIES[name]
        assert family.kinds, name
        assert re.search(r"#\d+|et al\.|issue 13|FlashAttention 2\.1", family.description), name


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ROW_KINDS)
@pytest.mark.parametrize("family", ROW_FAMILIES)
def test_row_references_agree_with_the_oracle_on_the_first_and_last_rows(family, kind, dtype):
    for pc in prepared(family, kind, dtype):
        sample = [0, len(pc.inputs["x"]) - 1]
        x = pc.inputs["x"][sample].astype(np.float64)
        mask = None if pc.mask is None else pc.mask[sample]
        want = rounded_rows("softmax" if kind == "masked_softmax" else kind, x, dtype, mask)
        np.testing.assert_array_equal(pc.reference.value[sample].astype(np.float64), want, err_msg=pc.case.description)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", ATTENTION_FAMILIES)
def test_attention_references_agree_with_the_oracle_on_the_first_and_last_queries(family, dtype):
    for pc in prepared(family, "attention", dtype):
        q, k, v = (pc.inputs[n].astype(np.float64) for n in ("q", "k", "v"))
        batch = pc.reference.value.shape[:-2]
        k, v = np.broadcast_to(k, batch + k.shape[-2:]), np.broadcast_to(v, batch + v.shape[-2:])
        q = np.broadcast_to(q, batch + q.shape[-2:])
        keep = np.broadcast_to(True if pc.mask is None else pc.mask, batch + (q.shape[-2], k.shape[-2]))
        first = (0,) * len(batch)
        for i in (0, q.shape[-2] - 1):
            got = pc.reference.value[first + (i,)].astype(np.float64)
            if not keep[first + (i,)].any():
                assert np.isnan(got).all()  # a query with nothing to attend: undefined
                continue
            args = q[first + (i,)], k[first], v[first], keep[first + (i,)]
            want = rounded(lambda prec, args=args: attention_row(*args, None, prec), dtype)
            np.testing.assert_array_equal(got, want, err_msg=f"{pc.case.description}, query {i}")


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_exact_probes_give_v_for_a_single_key_and_1_for_v_all_ones(dtype):
    single, ones, ones_masked = prepared("attn_exact_probes", "attention", dtype)
    v = single.inputs["v"].astype(np.float64)
    np.testing.assert_array_equal(single.reference.value.astype(np.float64), np.broadcast_to(v, (2, 8, 64)))
    assert (ones.reference.value == 1).all() and (ones_masked.reference.value == 1).all()
    table = audit("softaudit.candidates.attention:upcast", "attn_exact_probes", dtype)
    assert table.loc["attention.upcast"].verdict == "pass"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_best_practice_attention_gives_the_exact_answers_exactly_in_16_bits(dtype):
    for pc in prepared("attn_exact_probes", "attention", dtype):  # (it works in float32 and rounds once)
        y = attention_builtins.upcast(*(pc.inputs[n] for n in "qkv"), pc.mask)
        np.testing.assert_array_equal(y, pc.reference.value)


def test_a_running_sum_of_512_equal_terms_stalls_at_256_in_bfloat16():
    targets = ["softaudit.candidates.softmax:max_shifted_running", "softaudit.candidates.softmax:max_shifted_f32acc"]
    table = audit(targets, "uniform_512", "bfloat16")
    # 256 + 1 rounds to 256 in bfloat16 (8 bits), so p = 2**-8 where it is 2**-9: an error of 2**-9, which is
    # 2**7 ulp of 2**-9 (the ulp there is 2**-16).
    (pc,) = prepared("uniform_512", "softmax", "bfloat16")
    y = softmax_builtins.max_shifted_running(pc.inputs["x"])
    assert (y.astype(np.float64) == 2.0**-8).all()
    assert table.loc["softmax.max_shifted_running"].max_ulp == 128
    assert table.loc["softmax.max_shifted_f32acc"].max_ulp == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_softmax_of_one_minus_log_eps_and_zero_loses_the_top_entry_to_a_sum_that_rounds_to_one(dtype):
    pc = prepared("reported_vectors", "log_softmax", dtype)[0]  # [1 - log(eps), 0] (PyTorch #113708)
    x = pc.inputs["x"].astype(np.float64)  # (about [1 - log(eps), 0], rounded to the dtype)
    top = pc.reference.value[0, 0].astype(np.float64)
    eps = 2.0 ** (1 - format_of(dtype).precision)
    assert top < 0 and math.isclose(top, -math.log1p(math.exp(x[0, 1] - x[0, 0])), rel_tol=eps)  # about -eps / e
    assert log_softmax_builtins.shifted(pc.inputs["x"])[0, 0] == 0  # log(1 + eps / e) rounds to log(1)
    assert log_softmax_builtins.log1p_form_f32acc(pc.inputs["x"])[0, 0] == pc.reference.value[0, 0]


def test_two_finfo_min_planes_overflow_to_minus_inf_where_both_mask_and_the_where_form_survives_it():
    pc = prepared("mask_planes", "masked_softmax", "bfloat16")[0]
    x = pc.inputs["x"].astype(np.float64)
    # causal (j > i) and left padding (j < 3) both take (0, 1), (0, 2) and (1, 2)
    assert sorted(zip(*np.nonzero(x == -np.inf))) == [(0, 1), (0, 2), (1, 2)]
    float32_plane = prepared("mask_planes", "masked_softmax", "float16")[2]  # float32's finfo.min is -inf in float16
    assert (float32_plane.inputs["x"][~float32_plane.mask] == -np.inf).all()
    targets = ["softaudit.candidates.masked_softmax:where", "softaudit.candidates.masked_softmax:fill_neginf"]
    table = audit(targets, "mask_planes", "bfloat16")
    assert table.loc["masked_softmax.where"].verdict == "pass"
    assert table.loc["masked_softmax.fill_neginf"].note.split("; ", 1)[-1].startswith("fully masked rows give nan")


def test_a_float16_sum_of_65536_ones_overflows_though_every_term_is_one():
    (pc,) = prepared("equal_sum_overflow", "log_softmax", "float16")
    assert pc.inputs["x"].shape == (1, 65536) and prepared("equal_sum_overflow", "log_softmax", "float32") == []
    assert (pc.reference.value.astype(np.float64) == np.float16(-16 * math.log(2))).all()  # log(2**-16), rounded
    targets = ["softaudit.candidates.log_softmax:shifted", "softaudit.candidates.log_softmax:log1p_form_f32acc"]
    table = audit(targets, "equal_sum_overflow", "float16")
    assert table.loc["log_softmax.shifted"].verdict == "fail" and table.loc["log_softmax.shifted"].overflow == 65536
    assert table.loc["log_softmax.log1p_form_f32acc"].verdict == "pass"


def test_a_softmax_whose_float16_sum_overflows_is_said_to_overflow_not_to_flush():
    """Every output of the 65,536-long row is 2**-16, subnormal in float16: a sum kept in float16 overflows to inf
    and each exp / inf is 0, which the cause, the note and the fix say, rather than "flushed to zero"; a running sum
    stalls at 2048 instead (each output 1/2048), which is accumulation, not a subnormal result's error."""
    targets = ["softaudit.candidates.softmax:max_shifted", "softaudit.candidates.softmax:max_shifted_running"]
    table = audit(targets, "equal_sum_overflow", "float16")
    summed, running = table.loc["softmax.max_shifted"], table.loc["softmax.max_shifted_running"]
    assert summed.cause == "sum_overflow" and summed.flushed == 65536, summed.note
    assert "sum to 65536, past float16's largest value 65504" in summed.note and "overflows to inf" in summed.note
    # (every exact output is subnormal here, so a flush of the outputs gives the same zeros: the finding names each
    # model that reproduces them, the sum kept in float16 among them, and the note keeps the sum past 65504)
    assert "sum_in_dtype" in summed.finding.split(" or ") and "accumulate the sum in float32" in summed.fix
    assert running.cause == "accumulation" and running.sum_err > 0, running.note
    assert running.verdict == "fail"  # the probabilities sum to 32: not a standard algorithm's error (docs/policy.md)
    assert "sum_in_dtype" in running.finding.split(" or ") and "gradual underflow" not in running.fix


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_nan_in_masked_keys_changes_nothing_and_bottom_right_causal_masks_leave_queries_with_nothing(dtype):
    for pc in prepared("attn_nan_masked_key", "attention", dtype):
        clean = {n: np.nan_to_num(a.astype(np.float64)) for n, a in pc.case.arrays.items()}
        again = Prepared(type(pc.case)("attention", "clean", clean, pc.mask, None, ""), format_of(dtype), 0)
        np.testing.assert_array_equal(pc.reference.value, again.reference.value)
    targets = ["softaudit.candidates.attention:naive", "softaudit.candidates.attention:upcast"]
    nan_keys, alignment = audit(targets, "attn_nan_masked_key", dtype), audit(targets, "attn_causal_alignment", dtype)
    assert (nan_keys.nan == 0).all() and nan_keys.loc["attention.upcast"].verdict == "pass"
    # (Lq=9 > Lk=4, bottom-right; the note's first sentence is the finding's)
    assert alignment.loc["attention.naive"].note.split("; ", 1)[-1].startswith("fully masked rows give nan")
    assert alignment.loc["attention.upcast"].verdict == "pass"
