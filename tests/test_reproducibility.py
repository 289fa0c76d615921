"""Reproducibility measured beside accuracy (softaudit/reproducibility.py): run to run and between batches, with a
candidate that is deterministic but not batch-invariant (the built-in softmax.split_by_batch) and one that is
batch-invariant but not deterministic (each output an ulp up at random, as atomic adds make it)."""

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import softaudit
from softaudit import Policy
from softaudit.cases import FAMILIES
from softaudit.cli import main
from softaudit.reference import format_of, round_to
from softaudit.reproducibility import Reruns


def _exact_softmax(x):
    """float64 softmax rounded once to x's dtype: within half an ulp of float32's exact result."""
    w = np.asarray(x, dtype=np.float64)
    e = np.exp(w - w.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype(x.dtype)


@softaudit.candidate(kind="softmax", name="wobbly")
def wobbly(x, axis=-1):
    """Each output one ulp up at random, a fresh draw every call: nondeterministic, the same whatever the batch."""
    p = _exact_softmax(x)
    up = np.random.default_rng().random(p.shape) < 0.5
    return np.where(up, np.nextafter(p, np.float32(np.inf)), p)


@softaudit.candidate(kind="softmax", name="alone_differs")
def alone_differs(x, axis=-1):
    """Deterministic; one ulp up where the batch holds one row (a path for batch size 1)."""
    p = _exact_softmax(x)
    return np.nextafter(p, np.float32(np.inf)) if int(np.prod(x.shape[:-1])) == 1 else p


@softaudit.candidate(kind="attention", name="decode_differs")
def decode_differs(q, k, v, mask=None):
    """float64 attention rounded once, one ulp up where there is one query (a decode path)."""
    s = np.asarray(q, np.float64) @ np.swapaxes(np.asarray(k, np.float64), -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    o = ((e / e.sum(axis=-1, keepdims=True)) @ np.asarray(v, np.float64)).astype(q.dtype)
    return np.nextafter(o, np.float32(np.inf)) if q.shape[-2] == 1 else o


def _audit(target, families, policy=None, dtype="float32"):
    return softaudit.audit(target, dtypes=[dtype], suite="quick", families=families, policy=policy, isolation="none")


def test_the_reruns_count_exactly_the_outputs_that_move_and_by_how_many_ulps():
    """Three rows of 4: the first is rerun alone (one ulp up there), all three in a batch of 8. The row alone
    moves, the others never: 4 of 12 outputs, by 1 ulp; nothing moves run to run."""
    x = round_to(np.random.default_rng(1).standard_normal((3, 4)), np.float32)
    reruns = Reruns("softmax", {"x": x}, None, np.float32, seed=0)
    calls = reruns.calls(((3, 4),))
    assert [a["x"].shape for a, _, _ in calls] == [(3, 4), (1, 4), (8, 4)]
    outputs = [(alone_differs(a["x"]),) for a, _, _ in calls]
    moved = reruns.compare(0, alone_differs(x), outputs)
    assert (moved.repeat_checked, moved.repeat_moved) == (12, 0)
    assert (moved.batch_checked, moved.batch_moved, moved.batch_ulp) == (12, 4, 1.0)
    assert moved.batch_sizes == {1, 3, 8}
    columns = moved.columns()
    assert {name: columns.pop(name) for name in ("repeat_differ", "repeat_ulp", "batch_differ", "batch_ulp")} == {
        "repeat_differ": 0.0,
        "repeat_ulp": 0.0,
        "batch_differ": 4 / 12,
        "batch_ulp": 1.0,
    }
    assert np.isnan(list(columns.values())).all()  # (split_differ, split_ulp: a softmax has no key split)
    assert moved.note() == "not batch-invariant: 33% of outputs move by up to 1 ulp between batch sizes 1, 3 and 8"


def test_the_batch_is_rebuilt_around_the_items_with_mates_and_padding_that_keeps_nothing():
    x = round_to(np.random.default_rng(2).standard_normal((2, 3, 5)), np.float32)
    mask = np.random.default_rng(3).random((2, 3, 5)) < 0.7
    reruns = Reruns("masked_softmax", {"x": x}, mask, np.float32, seed=4)
    arrays, together, _, places, _ = reruns.reruns[-1]
    assert arrays["x"].shape == (14, 5) and together.shape == (14, 5)
    np.testing.assert_array_equal(arrays["x"][places], x.reshape(6, 5))
    np.testing.assert_array_equal(together[places], mask.reshape(6, 5))
    others = np.setdiff1d(np.arange(14), places)
    padding = others[~together[others].any(axis=1)]
    assert len(padding) >= 3 and (arrays["x"][padding] == 0).all()  # the last half of the 8 others


def test_a_deterministic_candidate_that_is_not_batch_invariant():
    result = _audit("softaudit.candidates.softmax:split_by_batch", ["gaussian", "ties"])
    t = result.table
    assert (t.repeat_differ == 0).all() and (t.batch_differ > 0).all(), t[["family", "batch_differ"]]
    assert (t.batch_ulp >= 1).all() and (t.verdict == "pass").all()
    assert t.note.str.contains("not batch-invariant: ").all()
    required = _audit("softaudit.candidates.softmax:split_by_batch", ["gaussian"], Policy(require=["batch-invariant"]))
    row = required.table.iloc[0]
    assert (row.verdict, row.cause) == ("fail", "batch_variant")
    assert row.note.startswith("not batch-invariant: ") and "split-KV size" in row.fix
    assert (
        _audit("softaudit.candidates.softmax:split_by_batch", ["gaussian"], Policy(require=["deterministic"]))
        .table.iloc[0]
        .verdict
        == "pass"
    )


def test_a_batch_invariant_candidate_that_is_not_deterministic():
    t = _audit(wobbly, ["gaussian", "ties"]).table
    assert (t.repeat_differ > 0.25).all() and (t.repeat_ulp == 1).all()
    assert (t.batch_differ == 0).all()  # (it moves by an ulp whatever the batch: no more than run to run)
    assert t.note.str.contains("not deterministic: ").all() and not t.note.str.contains("batch").any()
    row = _audit(wobbly, ["gaussian"], Policy(require=["deterministic"])).table.iloc[0]
    assert (row.verdict, row.cause) == ("fail", "nondeterministic")
    assert _audit(wobbly, ["gaussian"], Policy(require=["batch-invariant"])).table.iloc[0].verdict == "pass"


def test_attention_reruns_the_last_query_alone_and_split_kv_moves_between_batches():
    t = _audit(decode_differs, ["attn_gaussian"]).table
    assert t.batch_differ.iloc[0] > 0 and "(and the last query alone)" in t.note.iloc[0]
    split = _audit("softaudit.candidates.attention:split_kv", ["attn_gaussian", "attn_masks"]).table
    assert (split.batch_differ > 0).all() and (split.verdict == "pass").all()


def test_modified_attention_reruns_carry_the_bias_and_per_head_arrays_with_their_batch_items():
    """A bias of (Lq, Lk) and a sink per head go along with each rerun's batch items (found by the hunt: the last
    query's rerun kept the whole (Lq, Lk) bias, which broadcast its output to (Lq, Lq, dv) and failed a sound
    candidate for its shape): every rerun's output has its shape, and the best built-in is batch-invariant."""
    from softaudit.candidates.attention import upcast

    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, 3, n, 8)).astype(np.float32) for n in (4, 6, 6))
    inputs = {"q": q, "k": k, "v": v, "bias": rng.standard_normal((4, 6)), "sinks": rng.standard_normal(3)}
    reruns = Reruns("attention", inputs, None, np.float32, seed=1)
    last = reruns.reruns[-1]
    assert last.last_query and last.arrays["bias"].shape == (6, 1, 6) and last.arrays["sinks"].shape == (6,)
    np.testing.assert_array_equal(last.arrays["bias"][0, 0], inputs["bias"][-1])
    outputs = []
    for arrays, mask, (shape,) in reruns.calls((q.shape[:-1] + (8,),)):
        extra = {n: a for n, a in arrays.items() if n not in "qkv"}
        out = upcast(arrays["q"], arrays["k"], arrays["v"], mask, **extra)
        assert out.shape == shape
        outputs.append((out,))
    moved = reruns.compare(0, outputs[0][0], outputs)
    assert moved.batch_checked == q.size and moved.batch_moved == 0


def test_the_built_ins_with_a_fixed_reduction_order_are_batch_invariant_and_deterministic():
    targets = ["softaudit.candidates.softmax:max_shifted_f32acc", "softaudit.candidates.attention:tiled_b64"]
    t = softaudit.audit(targets, dtypes=["float32", "bfloat16"], suite="quick", isolation="none").table
    checked = t[t.batch_differ.notna()]
    assert len(checked) > 40
    assert (checked.batch_differ == 0).all() and (t.repeat_differ.dropna() == 0).all()


def test_require_from_the_command_line_and_its_mistakes(tmp_path):
    args = ["run", "softaudit.candidates.softmax:split_by_batch", "--dtype", "float32", "--family", "gaussian"]
    args += ["--suite", "quick", "--out", str(tmp_path), "--cache-dir", "off", "--isolation", "none"]
    runner = CliRunner()
    assert runner.invoke(main, args).exit_code == 0
    assert runner.invoke(main, [*args, "--require", "batch-invariant"]).exit_code == 1
    wrong = runner.invoke(main, [*args, "--require", "bitwise"])
    assert wrong.exit_code == 2 and "batch-invariant" in wrong.output


def test_a_policy_rejects_an_unknown_requirement():
    with pytest.raises(ValueError, match="require must list some of deterministic, batch-invariant"):
        Policy(require=["bitwise"])
    with pytest.raises(ValueError, match="require must list"):
        Policy(require="deterministic")


def _float64_attention(q, k, v, mask):
    s = np.asarray(q, np.float64) @ np.swapaxes(np.asarray(k, np.float64), -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((e / e.sum(axis=-1, keepdims=True)) @ np.asarray(v, np.float64)).astype(q.dtype)


@softaudit.candidate(kind="attention", name="first_output_moves_with_the_split")
def first_output_moves(q, k, v, mask=None, *, num_splits=None):
    """float64 attention rounded once; its very first output one ulp up when asked for more than one split."""
    o = _float64_attention(q, k, v, mask)
    if num_splits is not None and num_splits > 1:
        o.flat[0] = np.nextafter(o.flat[0], np.float32(np.inf))
    return o


@softaudit.candidate(kind="attention", name="ignores_its_block_size")
def ignores_its_block_size(q, k, v, mask=None, block_size=64):
    """float64 attention rounded once, whatever block_size says: split-invariant."""
    return _float64_attention(q, k, v, mask)


def test_the_split_calls_count_exactly_the_outputs_that_move():
    """One output of a case moves with num_splits 2, 3, 4 and 8 (not 1): of the first two cases' outputs, exactly
    one each, by one ulp; the calls go through the worker process with their keyword."""
    t = softaudit.audit(first_output_moves, dtypes=["float32"], suite="quick", families=["attn_gaussian"]).table
    (row,) = t.to_dict("records")
    cases = FAMILIES["attn_gaussian"].cases("attention", format_of("float32"), "quick", 0)
    outputs = 0
    for case in cases[:2]:  # (the reruns' cases)
        q, k, v = (case.arrays[n] for n in ("q", "k", "v"))
        outputs += np.prod(np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])) * q.shape[-2] * v.shape[-1]
    assert row["split_ulp"] == 1.0
    assert row["split_differ"] == pytest.approx(2 / outputs, rel=1e-12)
    assert "between its own split and num_splits 1, 2, 3, 4 and 8" in row["note"]


def test_a_candidate_that_ignores_its_split_is_split_invariant_and_one_without_has_no_measure():
    t = _audit([ignores_its_block_size, decode_differs], ["attn_gaussian"]).table.set_index("candidate")
    assert t.loc["ignores_its_block_size", "split_differ"] == 0.0
    assert t.loc["ignores_its_block_size", "split_ulp"] == 0.0
    assert np.isnan(t.loc["decode_differs", "split_differ"])


def test_split_kv_moves_between_key_splits_and_fails_where_split_invariance_is_required():
    split = _audit("softaudit.candidates.attention:split_kv", ["attn_gaussian"]).table
    assert split.split_differ.iloc[0] > 0.1 and split.verdict.iloc[0] == "pass"
    required = _audit("softaudit.candidates.attention:split_kv", ["attn_gaussian"], Policy(require=["split-invariant"]))
    row = required.table.iloc[0]
    assert (row.verdict, row.cause) == ("fail", "split_variant")
    assert "pin how the keys are split" in row.fix


def test_the_key_splits_are_called_where_units_run_in_worker_processes(on_the_workers):
    """A unit in a worker process gets the candidate by its source: its signature is read there too, so the split
    columns are the serial run's (the flake matrix found them NaN with --workers 2 and on Dask)."""
    target, families = "softaudit.candidates.attention:split_kv", ["attn_gaussian", "attn_shapes"]
    serial = softaudit.audit(target, dtypes=["float16"], suite="quick", families=families, cache=False).table
    pooled = softaudit.audit(target, dtypes=["float16"], suite="quick", families=families, cache=False, workers=2)
    columns = ["family", "split_differ", "split_ulp"]
    assert (serial.split_differ > 0).all()
    pd.testing.assert_frame_equal(serial[columns], pooled.table[columns])
