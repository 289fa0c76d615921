"""The audit loop: misbehaving candidates become error rows, finished rows are kept, worst inputs replay."""

import dataclasses
import time

import numpy as np
import pytest

import softaudit
from softaudit import reference as R
from softaudit.execute import NOT_AGAIN


def good(x, axis=-1):
    w = x.astype(np.float64)
    with np.errstate(invalid="ignore"):  # rows of -inf: NaN, as the reference says
        e = np.exp(w - w.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


def raises(x, axis=-1):
    raise RuntimeError("kaboom")


def wrong_shape(x, axis=-1):
    return x[..., :1]


def not_an_array(x, axis=-1):
    return "nope"


def all_nan(x, axis=-1):
    return np.full_like(x, np.nan)


def hangs(x, axis=-1):
    time.sleep(30)
    return x


def wide(x, axis=-1):
    return good(x.astype(np.float64), axis)  # float64 out: noted and cast


def test_misbehaving_candidates_become_error_rows_and_the_run_goes_on():
    targets = [good, raises, wrong_shape, not_an_array, all_nan, hangs]
    result = softaudit.audit(targets, kind="softmax", dtypes=["float32"], suite="quick", timeout=0.5)
    table = result.table
    by = {name.rsplit(":", 1)[-1]: t for name, t in table.groupby("candidate")}
    assert (by["good"].verdict == "pass").all()
    expected = {
        "raises": "raised RuntimeError: kaboom",
        "wrong_shape": "returned shape",
        "not_an_array": "returned str, not an array",
        "all_nan": "returned NaN everywhere",
    }
    for name, message in expected.items():
        assert (by[name].verdict == "error").all(), name
        assert by[name].note.str.contains(message).all(), (name, by[name].note.iloc[0])
    # A candidate past its time limit is killed once, then not called again in that dtype: one wait, not one per family.
    assert (by["hangs"].verdict == "error").all()
    assert list(by["hangs"].note) == ["no answer in 0.5 s: killed"] + [NOT_AGAIN] * (len(by["hangs"]) - 1)
    assert len(by["good"]) == len(by["raises"]) == len(by["hangs"])  # every family of every candidate has its row


def test_another_output_dtype_is_noted_and_cast():
    table = softaudit.audit(wide, kind="softmax", dtypes=["float16"], suite="quick").table
    assert table.note.str.contains("returned float64, cast to float16").all()


def test_the_results_table_has_the_documented_columns():
    table = softaudit.audit("softaudit.candidates.softmax:naive", dtypes=["float32"], suite="quick").table
    for column in (
        "candidate",
        "kind",
        "dtype",
        "family",
        "cases",
        "elements",
        "max_ulp",
        "mean_ulp",
        "max_rel_err",
        "max_abs_err",
        "nan",
        "overflow",
        "underflow",
        "mask_leak",
        "sum_err",
        "verdict",
        "note",
    ):
        assert column in table.columns
    assert set(table.verdict) <= {"pass", "fail", "error"}


def test_worst_inputs_are_exact_and_replay_to_the_same_error():
    from softaudit import worst as W
    from softaudit.candidates import log_softmax

    result = softaudit.audit("softaudit.candidates.log_softmax:shifted", dtypes=["float32"], suite="quick")
    key = ("log_softmax.shifted", "float32", "dominant", "")
    record = result.worst[key].as_json()
    spec = record["inputs"]["x"]
    x = np.array([float.fromhex(v) for v in spec["values"]], np.float32).reshape(spec["shape"])
    y = log_softmax.shifted(x)
    ref = R.evaluate("log_softmax", x, dtype="float32")
    at = tuple(record["element"])
    spacing = float(np.spacing(np.float32(abs(ref.value[at]))))
    assert abs((float(y[at]) - ref.hi[at]) - ref.lo[at]) / spacing == pytest.approx(record["ulp_err"], rel=1e-9)
    assert float.fromhex(record["reference"]) == float(ref.value[at])
    assert float.fromhex(record["output"]) == float(y[at])
    row = result.table[(result.table.family == "dominant")].iloc[0]
    again = W.replay(record)  # loads the candidate by its target name and calls it on the whole case
    assert again["cond_err"] == row.max_cond_err and again["element"] == record["element"]
    assert W.replay(record, log_softmax.shifted)["cond_err"] == row.max_cond_err
    by_recipe = dict(record, inputs=None)  # a large case keeps only the recipe: the family makes it again
    assert W.replay(by_recipe)["cond_err"] == row.max_cond_err
    long = result.worst[("log_softmax.shifted", "float32", "long", "")]
    assert long.inputs is None and W.replay(long)["cond_err"] == result.table.set_index("family").max_cond_err["long"]


def test_attention_mask_leak_is_detected_by_moving_masked_values():
    def leaky(q, k, v, mask=None):
        out = R.attention(q, k, v, None, dtype=q.dtype)  # ignores the mask: masked keys change the output
        return out

    table = softaudit.audit(leaky, kind="attention", dtypes=["float32"], suite="quick").table
    masks = table[table.family == "attn_masks"].iloc[0]
    assert masks.mask_leak > 0 and "mask leak" in masks.note


def test_unknown_suite_and_dtype():
    with pytest.raises(ValueError, match="suite must be one of quick, default, full"):
        softaudit.audit(suite="huge")
    with pytest.raises(ValueError, match="unknown dtype 'float13'"):
        softaudit.audit(dtypes=["float13"])


def test_no_measure_is_nan_and_nothing_warns_on_the_quick_suite(quick_audit):
    """A NaN max_ulp would compare as passing; 0 * inf from an inverted subnormal ulp once made one. The measures
    are NaN exactly where nothing could be compared (e.g. every output NaN), never elsewhere."""
    table, warned = quick_audit
    assert not warned, [str(w.message) for w in warned]
    measures = ["max_cond_err", "max_ulp", "mean_ulp", "max_rel_err", "max_abs_err"]
    measured = table[(table.verdict != "error") & (table.elements > 0)]
    assert len(measured) > 1000 and not measured[measures].isna().any().any()
    uncompared = table[(table.verdict != "error") & (table.elements == 0)]
    assert len(uncompared) and uncompared[measures].isna().all().all()
    assert (uncompared[uncompared.nan > 0].verdict == "fail").all()  # all NaN is never a pass
    assert set(uncompared[uncompared.verdict == "pass"].family) == {"undefined"}  # (NaN logits: NaN is right)


def test_float8_dtypes_can_be_audited():
    table = softaudit.audit(dtypes=["float8_e4m3fn", "float8_e5m2"], suite="quick", kind="softmax").table
    assert set(table.dtype) == {"float8_e4m3fn", "float8_e5m2"} and (table.verdict != "error").all()


def scribbles(x, axis=-1):
    """A correct softmax that shifts its input in place, as some kernels do."""
    with np.errstate(invalid="ignore"):
        x -= x.max(axis=axis, keepdims=True)
    return good(x, axis)


def test_a_candidate_writing_into_its_input_changes_nothing_for_the_others(monkeypatch):
    from softaudit import prepare

    monkeypatch.setattr(prepare, "_CACHE", type(prepare._CACHE)())
    options = {"kind": "softmax", "dtypes": ["float32"], "suite": "quick", "families": ["gaussian", "offset"]}
    alone = softaudit.audit(good, **options).table
    both = softaudit.audit([scribbles, good], **options).table
    cols = ["max_ulp", "mean_ulp", "correctly_rounded", "verdict"]
    assert both[both.candidate.str.endswith("good")][cols].reset_index(drop=True).equals(alone[cols])
    assert (both.verdict == "pass").all()  # scribbles saw its inputs as they are, twice over


def c_order_only(x, axis=-1):
    if not x.flags.c_contiguous:  # numpy sums a strided row in another order: the invariants would see that
        raise ValueError("not in C order")
    return good(x, axis)


def test_every_call_gets_its_inputs_in_c_order_the_invariants_probes_too():
    table = softaudit.audit(c_order_only, kind="softmax", dtypes=["float32"], suite="quick", cache=False).table
    assert (table.verdict == "pass").all() and (table.invariants.fillna("") == "").all(), table.note.tolist()


def in_place(x, axis=-1):
    """Softmax written into its input, which it returns (the audit reuses input buffers between cases)."""
    with np.errstate(invalid="ignore"):
        x -= x.max(axis=axis, keepdims=True)
        np.exp(x, out=x)
        x /= x.sum(axis=axis, keepdims=True)
    return x


def out_of_place(x, axis=-1):
    return in_place(x.copy(), axis)


def test_an_output_that_is_the_input_buffer_is_measured_before_the_buffer_is_reused():
    options = {
        "kind": "softmax",
        "dtypes": ["float32", "float16"],
        "suite": "quick",
        "families": ["gaussian", "long"],
        "cache": False,
    }
    table = softaudit.audit([in_place, out_of_place], **options).table
    cols = ["dtype", "family", "max_ulp", "mean_ulp", "correctly_rounded", "invariants", "verdict"]
    mine, theirs = (
        table[table.candidate.str.endswith(n)][cols].reset_index(drop=True) for n in ("in_place", "out_of_place")
    )
    assert len(mine) == 4 and mine.equals(theirs)


def test_a_second_audit_reuses_the_prepared_families(monkeypatch, counted_references):
    from softaudit import prepare

    calls = counted_references
    options = {"kind": "softmax", "dtypes": ["float16"], "suite": "quick", "families": ["gaussian", "ties"]}
    first = softaudit.audit(good, **options).table
    computed = len(calls)
    assert computed > 0 and len(prepare._CACHE) == 2
    second = softaudit.audit(good, **options).table
    assert len(calls) == computed  # no reference computed again
    assert first.drop(columns="seconds").equals(second.drop(columns="seconds"))
    softaudit.audit(good, cache=False, **options | {"families": ["dominant"]})
    assert len(prepare._CACHE) == 2 and len(calls) > computed  # not kept
    monkeypatch.setattr(prepare, "CACHE_BYTES", 1)
    softaudit.audit(good, **options | {"families": ["dominant"]})
    # (the older ones dropped; the last part: the declared conventions that change the family, none here)
    assert list(prepare._CACHE) == [("dominant", "softmax", "float16", "quick", 0, ())]
    prepare.clear_cache()
    assert not prepare._CACHE


def test_a_family_with_no_case_in_a_dtype_gives_no_row():
    """attn_large_activations has no bfloat16 case (scores that large overflow float32 too): no empty row."""
    from softaudit.cases import FAMILIES

    assert not FAMILIES["attn_large_activations"].cases("attention", R.format_of("bfloat16"), "quick")
    table = softaudit.audit(
        "softaudit.candidates.attention:upcast",
        dtypes=["bfloat16", "float16"],
        suite="quick",
        families=["attn_large_activations", "attn_gaussian"],
        cache=False,
    ).table
    assert sorted(zip(table.dtype, table.family)) == [
        ("bfloat16", "attn_gaussian"),
        ("float16", "attn_gaussian"),
        ("float16", "attn_large_activations"),
    ]


def test_worst_inputs_of_a_run_on_a_device_replay_there():
    """A framework row records the device it ran on; its replay command names it and replay() uses it."""
    pytest.importorskip("torch")
    from softaudit import worst as W

    result = softaudit.audit(
        "softaudit.frameworks.torch:softmax", dtypes=["float16"], suite="quick", device="cpu", families=["textbook"]
    )
    record = result.worst[("torch.softmax", "float16", "textbook", "")]
    assert record.device == "cpu" and "--device cpu" in record.command()
    assert W.replay(record.as_json())["cond_err"] == result.table.max_cond_err[0]
    assert "--device" not in dataclasses.replace(record, device=None).command()


def test_each_output_of_attention_grad_is_a_row_and_its_worst_input_replays_that_output():
    from softaudit import worst as W

    result = softaudit.audit(
        "softaudit.candidates.attention_grad:naive",
        dtypes=["float16"],
        suite="quick",
        families=["attn_gaussian"],
        cache_dir="off",
    )
    assert list(result.table.output) == ["dq", "dk", "dv"]
    for name in ("dq", "dk", "dv"):
        record = result.worst[("attention_grad.naive", "float16", "attn_gaussian", name)]
        assert record.output_name == name
        again = W.replay(record.as_json())
        assert again["cond_err"] == record.cond_err and again["element"] == record.element
