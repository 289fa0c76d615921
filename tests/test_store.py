"""Prepared families kept on disk between processes: exact round trips, read-only maps, invalidation, pruning."""

import dataclasses
import os
import subprocess
import sys

import ml_dtypes
import mpmath
import numpy as np
import pytest

import softaudit
from softaudit import _packed, _store, metrics, prepare, reference
from softaudit.cases import FAMILIES, Case
from softaudit.reference import format_of, round_to

from . import test_metric_edges
from .reference import oracle
from .test_runner import good

OPTIONS = {"kind": "softmax", "dtypes": ["bfloat16"], "suite": "quick", "families": ["gaussian", "ties"]}


def test_arrays_come_back_bit_for_bit_read_only_and_mapped(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 50))
    obj = {
        "f64": x,
        "bf16": x.astype(ml_dtypes.bfloat16),
        "bool": x > 0,
        "int8": np.arange(7, dtype=np.int8),
        "strided": x[:, ::3],
        "scalar": np.float32(2.5),
        "nested": [x.T, None, "text"],
    }
    _store.save(tmp_path / "a.pkl", obj)
    back = _store.load(tmp_path / "a.pkl")
    for name in ("f64", "bf16", "bool", "int8", "strided"):
        assert back[name].dtype == obj[name].dtype
        assert back[name].tobytes() == obj[name].tobytes()
    assert back["scalar"] == np.float32(2.5) and back["nested"][1:] == [None, "text"]
    assert np.array_equal(back["nested"][0], x.T)
    assert not back["f64"].flags.writeable and not back["f64"].flags.owndata  # a view of the mapped file
    assert back["f64"].ctypes.data % _store.ALIGN == 0


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_damaged_file_is_computed_afresh_and_removed(tmp_path, damage):
    path = tmp_path / "a.pkl"
    _store.save(path, {"x": np.arange(1000.0)})
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) - 100], "garbage": b"x" * 500, "empty": b""}[damage])
    assert _store.load(path) is None and not path.exists()
    assert _store.load(tmp_path / "missing.pkl") is None


def test_a_new_process_reuses_the_references_and_gives_the_same_table(tmp_path, counted_references):
    first = softaudit.audit(good, cache_dir=tmp_path, **OPTIONS).table
    computed = len(counted_references)
    assert computed > 0
    assert sorted(p.name.split("-", 1)[1] for p in tmp_path.iterdir()) == [
        "gaussian-softmax-bfloat16-quick-0.pkl",
        "ties-softmax-bfloat16-quick-0.pkl",
    ]
    prepare.clear_cache()  # as a new process would start
    second = softaudit.audit(good, cache_dir=tmp_path, **OPTIONS).table
    assert len(counted_references) == computed  # nothing computed again
    assert first.drop(columns="seconds").equals(second.drop(columns="seconds"))
    prepare.clear_cache()
    softaudit.audit(good, cache_dir=tmp_path, **OPTIONS | {"seed": 1})  # other cases: other files
    assert len(counted_references) > computed and len(list(tmp_path.iterdir())) == 4


def test_other_code_does_not_read_the_files(tmp_path, counted_references, monkeypatch):
    softaudit.audit(good, cache_dir=tmp_path, **OPTIONS)
    computed = len(counted_references)
    prepare.clear_cache()
    monkeypatch.setattr(_store, "fingerprint", lambda: "0ther")
    softaudit.audit(good, cache_dir=tmp_path, **OPTIONS)
    assert len(counted_references) == 2 * computed


def test_a_cache_written_as_another_cpu_is_not_read(tmp_path):
    # numpy's SIMD targets and OpenBLAS's kernels change the comparisons' bits, which a kept family holds: the gate
    # read 633 -> 817 ulp as a regression from a cache warmed as another CPU (issue 24). Each profile its own files.
    profile = {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Sandybridge"}
    code = "from softaudit import _platform, _store; print(_platform.cpu()); print(_store.fingerprint())"
    prints = [
        subprocess.run([sys.executable, "-c", code], env=os.environ | env, capture_output=True, text=True, check=True)
        for env in ({}, profile)
    ]
    (native_cpu, native), (other_cpu, other) = (p.stdout.split("\n")[:2] for p in prints)
    if native_cpu == other_cpu:
        pytest.skip(f"this CPU computes as the other profile does ({native_cpu})")
    assert native and other and native != other


def test_off_and_cache_false_write_nothing(tmp_path, counted_references, monkeypatch):
    softaudit.audit(good, cache_dir="off", **OPTIONS)
    softaudit.audit(good, cache=False, cache_dir=tmp_path, **OPTIONS)
    monkeypatch.setenv("SOFTAUDIT_CACHE_DIR", "off")
    assert _store.folder() is None
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("SOFTAUDIT_CACHE_DIR", str(tmp_path / "here"))
    assert _store.folder() == tmp_path / "here"
    monkeypatch.delenv("SOFTAUDIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _store.folder() == tmp_path / "xdg" / "softaudit"


def test_the_least_recently_used_files_go_past_the_limit(tmp_path, monkeypatch):
    for i, name in enumerate(["old", "mid", "new"]):
        _store.save(tmp_path / f"{name}.pkl", np.zeros(10_000))
        os.utime(tmp_path / f"{name}.pkl", (1000 + i, 1000 + i))
    _store.load(tmp_path / "old.pkl")  # used now: the most recent
    monkeypatch.setattr(_store, "MAX_BYTES", 100_000)  # one of the 80 kB files stays
    _store.save(tmp_path / "newest.pkl", np.zeros(10))
    _store.prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["newest.pkl", "old.pkl"]


@pytest.mark.parametrize("workers", [1, 2])
def test_an_audit_that_wrote_prunes_the_folder_once_at_its_end(tmp_path, monkeypatch, workers):
    """Not once per family written (each prune scans the whole folder), and also where worker processes wrote."""
    prepare.clear_cache()
    old = tmp_path / "old.pkl"
    _store.save(old, np.zeros(10_000))
    os.utime(old, (1000, 1000))  # the least recently used
    pruned = []
    monkeypatch.setattr(_store, "prune", lambda folder, prune=_store.prune: pruned.append(folder) or prune(folder))
    monkeypatch.setattr(_store, "MAX_BYTES", 1)  # everything goes but what pruning spares: none
    softaudit.audit(good, cache_dir=tmp_path, workers=workers, isolation="none", **OPTIONS)
    assert pruned == [tmp_path] and not old.exists()


def test_a_folder_that_cannot_be_written_warns_and_the_audit_goes_on(tmp_path, counted_references):
    blocked = tmp_path / "a_file"  # (a file where the folder should be: refused even to root)
    blocked.write_text("")
    with pytest.warns(UserWarning, match="cannot keep prepared cases") as caught:
        table = softaudit.audit(good, cache_dir=blocked, **OPTIONS).table
    assert (table.verdict == "pass").all() and len(table) == 2
    assert len(caught) == 1  # said once, not tried again for the second family


def test_the_command_line_keeps_families_in_the_folder_it_is_given(tmp_path):
    """Twice with the folder (the second run reads what the first kept), once with --cache-dir off (nothing kept
    anywhere): the same verdict, exit code and table each time."""
    import pandas as pd

    env = os.environ | {"SOFTAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    command = [
        sys.executable,
        "-c",
        "from softaudit.cli import main; main()",
        "run",
        "softaudit.candidates.softmax:naive",
        "--dtype",
        "float32",
        "--suite",
        "quick",
        "--family",
        "gaussian",
        "-q",
    ]
    runs = [(env, []), (env, []), (env | {"SOFTAUDIT_CACHE_DIR": str(tmp_path / "other")}, ["--cache-dir", "off"])]
    tables = []
    for i, (run_env, extra) in enumerate(runs):
        out = tmp_path / f"out{i}"
        done = subprocess.run(
            [*command, "--out", str(out), *extra], env=run_env, capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 1, done.stderr  # naive softmax overflows on the gaussian family: a fail
        assert done.stdout.startswith("FAIL  softmax.naive float32 (1 family, worst ") and not done.stderr
        assert "no_max_shift: exp(x) is taken without subtracting the row max" in done.stdout
        tables.append(pd.read_csv(out / "results.csv").drop(columns="seconds"))
        if i == 0:
            kept = [p.name.split("-", 1)[1] for p in (tmp_path / "cache").iterdir()]
            assert kept == ["gaussian-softmax-float32-quick-0.pkl"]
    assert list(tables[0].verdict) == ["fail"]
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    assert len(list((tmp_path / "cache").iterdir())) == 1 and not (tmp_path / "other").exists()


def test_pruning_passes_over_a_file_another_process_moves_meanwhile(tmp_path, monkeypatch):
    """Worker processes write families into one folder at once: a temporary file listed by one may be renamed
    into place by another before it is looked at."""
    _store.save(tmp_path / "kept.pkl", np.zeros(10))
    (tmp_path / ".tmp-moving").write_bytes(b"x")
    listed = os.scandir

    def listing_then_moved(folder):
        entries = list(listed(folder))
        (tmp_path / ".tmp-moving").unlink()
        return iter(entries)

    monkeypatch.setattr(os, "scandir", listing_then_moved)
    _store.prune(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["kept.pkl"]


def _edge_rows(dtype: str) -> np.ndarray:
    """Rows of 3 logits (in the dtype, as float64) whose softmax, log-softmax and log-sum-exp sit at the edges the
    measures have (tests/test_metric_edges.py): subnormal, at float64's bottom (where only the scaled correction
    `fine` holds r - hi), just below a power of two, next to the largest value, rounding to 0."""
    rows = [row + [-np.inf] * (3 - len(row)) for _, row in test_metric_edges._rows(dtype)]
    return round_to(np.array(rows), dtype).astype(np.float64)


def _edge_cases(dtype: str) -> list:
    """One case of each kind at the edges, with undefined rows (a NaN, a logit that overflows the dtype, nothing
    kept), masks, and the long rows and attention whose kept case holds its conditioning."""
    rng = np.random.default_rng(7)
    x = np.concatenate([_edge_rows(dtype), [[np.nan, 0.0, 1.0], [1e39, 0.0, 1.0], [0.0, -1.0, 2.0]]])
    mask = np.ones(x.shape, bool)
    mask[-1] = False  # nothing kept
    mask[0, 1] = False
    qkv = {"q": rng.standard_normal((2, 4, 8)), "k": rng.standard_normal((2, 32, 8)) * 4}
    qkv["v"] = rng.standard_normal((2, 32, 8)) * np.array([1, 1e-30, 1e30, 1, 1, 1, 1, 1])  # tiny and huge outputs
    keys = rng.random((4, 32)) < 0.5
    keys[1] = False  # a query with nothing to attend
    arrays = [
        ("softmax", {"x": x}, None),
        ("log_softmax", {"x": x}, None),
        ("logsumexp", {"x": x}, None),
        ("logsumexp", {"x": rng.standard_normal((4, 64)) * 50}, None),
        ("masked_softmax", {"x": x}, mask),
        ("softmax_grad", {"x": x, "g": rng.standard_normal(x.shape)}, None),
        ("masked_softmax_grad", {"x": x, "g": rng.standard_normal(x.shape)}, mask),
        ("attention", qkv, keys),
        ("attention_grad", qkv | {"g": rng.standard_normal((2, 4, 8))}, keys),
    ]
    return [Case(kind, "edges", a, m, None, f"{kind} at the edges") for kind, a, m in arrays]


def _same(a, b) -> bool:
    """a and b hold the same bits (arrays, and tuples, lists and dicts of them; anything else by ==)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a, b = np.asarray(a), np.asarray(b)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_a_kept_family_measures_exactly_as_the_computed_one(tmp_path, dtype):
    """A kept case holds its rounded inputs and packed references only; what it derives when read back (the
    references, every array of the bases, the probes) holds the same bits as the computed case's, and every
    measure of every output reads the same: a correctly rounded output, one off by a few spacings, zeros (flushes
    and underflows), NaNs."""
    fmt = format_of(dtype)
    computed = prepare.PreparedFamily([prepare.Prepared(c, fmt, i) for i, c in enumerate(_edge_cases(dtype))])
    for pc in computed.prepared:
        pc.complete()
    _store.save(tmp_path / "edges.pkl", computed)
    kept = _store.load(tmp_path / "edges.pkl")
    seen = {"subnormal": 0, "fine": 0, "undefined": 0, "extras": 0}
    for pc, back in zip(computed.prepared, kept.prepared):
        assert "bases" not in back.__dict__ and "probes" not in back.__dict__  # derived when read, not kept
        seen["extras"] += "extras" in back.__dict__
        assert _same(pc.inputs, back.inputs) and back.overflowed == pc.overflowed
        for name in pc.inputs:  # the case's arrays: its inputs, exactly, where the originals were
            assert _same(back.case.arrays[name], pc.inputs[name].astype(np.float64))
        for ref, again in zip(pc.references, back.references):
            for name in ("value", "hi", "lo", "undefined", "fine"):
                assert _same(getattr(ref, name), getattr(again, name)), (pc.case.kind, name)
        for b, again in zip(pc.bases, back.bases):
            for field in dataclasses.fields(b):
                assert _same(getattr(b, field.name), getattr(again, field.name)), (pc.case.kind, field.name)
            seen["subnormal"] += b.subnormal is not None
            seen["fine"] += b.fine is not None
            seen["undefined"] += bool(np.any(b.undefined))
        assert _same(vars(pc.probes) if pc.probes else None, vars(back.probes) if back.probes else None)
        for index, ref in enumerate(pc.references):
            with np.errstate(all="ignore"):  # (a few spacings off the largest value overflow)
                off = (ref.hi * (1 + 2.0 ** (3 - fmt.precision))).astype(ref.value.dtype)
            for y in (ref.value, off, np.zeros_like(ref.value), ref.value * np.nan):
                want = metrics.measure(pc.output(index).basis, y, case_index=0)
                assert repr(metrics.measure(back.output(index).basis, y, case_index=0)) == repr(want)
    assert (
        seen["subnormal"] and seen["undefined"] and seen["extras"] == 2
    )  # (the edges are there; the long log-sum-exp and attention keep their scales)
    assert seen["fine"] or dtype != "float64"
    assert computed.prepared[0].overflowed == (dtype != "float64")  # 1e39 overflows every narrower dtype


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "bfloat16"])
def test_a_kept_reference_is_the_correct_rounding_and_the_exact_value(tmp_path, dtype):
    """Read back, against mpmath (tests/reference/oracle.py, which shares no code with softaudit): the rounded
    values are the correct rounding, bit for bit, and the exact value (hi + lo, or hi + fine x 2**-1074 where the
    reference keeps the scaled correction) is within 2**-20 of a spacing of the dtype at r (subnormal spacings
    included): far finer than the measures read, which is what they need."""
    rng = np.random.default_rng(3)
    x = np.concatenate([_edge_rows(dtype), round_to(rng.standard_normal((6, 3)) * 30, dtype).astype(np.float64)])
    pc = prepare.Prepared(Case("softmax", "edges", {"x": x}, None, None, ""), format_of(dtype), 0)
    _store.save(tmp_path / "a.pkl", prepare.PreparedFamily([pc]))
    (ref,) = _store.load(tmp_path / "a.pkl").prepared[0].references
    assert ref.value.dtype == np.dtype(round_to(np.zeros(1), dtype).dtype)
    assert _same(ref.value.astype(np.float64), oracle.rounded_rows("softmax", x, dtype))
    fine = np.zeros(x.shape) if ref.fine is None else ref.fine
    p, emin, _ = test_metric_edges._finfo(dtype)
    with mpmath.workprec(2400):
        for i, row in enumerate(x):
            for j, exact in enumerate(oracle.row_kind("softmax", row, None, 2400)):
                low = mpmath.ldexp(float(fine[i, j]), -1074) if fine[i, j] else mpmath.mpf(float(ref.lo[i, j]))
                error = abs(mpmath.mpf(float(ref.hi[i, j])) + low - exact)
                assert error <= mpmath.ldexp(test_metric_edges._spacing(exact, p, emin), -20), (i, j, error)


def test_a_kept_family_is_its_inputs_and_one_or_two_float64_per_output(tmp_path):
    """The file holds the rounded inputs, hi (lo too, for float64) and little more: no float64 originals, no
    error bounds or tiers, none of the bases' arrays, no probes (before issue 26 it held about 6x this)."""
    for dtype, per_output in (("float16", 8), ("float64", 16)):
        fmt = format_of(dtype)
        cases = FAMILIES["gaussian"].cases("softmax", fmt, "quick")
        fam = prepare.PreparedFamily([prepare.Prepared(c, fmt, i) for i, c in enumerate(cases)])
        _store.save(tmp_path / f"{dtype}.pkl", fam)
        inputs = sum(a.nbytes for pc in fam.prepared for a in pc.inputs.values())
        outputs = sum(r.hi.size for pc in fam.prepared for r in pc.references)
        size = (tmp_path / f"{dtype}.pkl").stat().st_size
        assert size <= 1.1 * (inputs + per_output * outputs) + 8192, (dtype, size, inputs, outputs)


def _built_in(family: str, kind: str, dtype: str, suite: str = "quick") -> prepare.PreparedFamily:
    """A built-in family as `prepare.family` makes it: each case with its recipe (family, suite, seed)."""
    fmt = format_of(dtype)
    cases = FAMILIES[family].cases(kind, fmt, suite, 0)
    return prepare.PreparedFamily([prepare.Prepared(c, fmt, i, (family, suite, 0)) for i, c in enumerate(cases)])


@pytest.mark.parametrize(
    ("family", "kind", "dtype"),
    [
        ("gaussian", "softmax", "bfloat16"),
        ("mask_grid", "masked_softmax", "float16"),
        ("ce_ignored", "cross_entropy", "float32"),
        ("attn_alibi", "attention", "float64"),
    ],
)
def test_a_built_in_family_keeps_its_recipe_not_its_inputs(tmp_path, family, kind, dtype):
    """A built-in case's inputs are made again from its recipe when read (issue 26: they were 277 of the main job's
    636 MB): the file holds the references and no input, and the case read back has the computed one's inputs, mask,
    options and float64 originals, bit for bit (class labels still int64)."""
    computed = _built_in(family, kind, dtype)
    _store.save(tmp_path / "f.pkl", computed)
    without = prepare.PreparedFamily([prepare.Prepared(pc.case, pc.fmt, i) for i, pc in enumerate(computed.prepared)])
    _store.save(tmp_path / "inputs.pkl", without)  # (the same cases, no recipe: inputs kept)
    inputs = sum(a.nbytes for pc in computed.prepared for a in pc.inputs.values())
    assert (tmp_path / "f.pkl").stat().st_size <= (tmp_path / "inputs.pkl").stat().st_size - inputs
    kept = _store.load(tmp_path / "f.pkl")
    for pc, back in zip(computed.prepared, kept.prepared):
        assert _same(back.inputs, pc.inputs) and _same(back.mask, pc.mask) and back.overflowed == pc.overflowed
        assert _same(dict(back.case.arrays), dict(pc.case.arrays)) and back.case.options == pc.case.options
        assert back.case.description == pc.case.description and "digest" not in back.__dict__


def test_a_family_that_makes_other_inputs_than_its_file_is_computed_again(tmp_path, monkeypatch):
    """The digest kept in the inputs' place: a family that made other cases than those the references were
    computed from (a generator changed without the code's digest seeing it, or not deterministic) reads as a
    damaged file: removed, and the audit computes the family again and gives the fresh table."""
    fresh = softaudit.audit(good, cache_dir="off", cache=False, **OPTIONS).table
    prepare.clear_cache()
    softaudit.audit(good, cache_dir=tmp_path, **OPTIONS)
    kept = sorted(p.name for p in tmp_path.iterdir())
    real = FAMILIES["gaussian"].make
    monkeypatch.setitem(
        FAMILIES,
        "gaussian",
        dataclasses.replace(FAMILIES["gaussian"], make=lambda *a: [({"x": m[0]["x"] * 1.5}, *m[1:]) for m in real(*a)]),
    )
    path = next(p for p in tmp_path.iterdir() if "-gaussian-" in p.name)
    assert _store.load(path) is None and not path.exists()  # (removed, as a damaged file is)
    monkeypatch.setitem(FAMILIES, "gaussian", dataclasses.replace(FAMILIES["gaussian"], make=real))
    prepare.clear_cache()
    again = softaudit.audit(good, cache_dir=tmp_path, **OPTIONS).table
    assert sorted(p.name for p in tmp_path.iterdir()) == kept
    assert again.drop(columns="seconds").equals(fresh.drop(columns="seconds"))


def test_a_family_without_a_recipe_keeps_its_inputs(tmp_path):
    """Cases of case files and the corpus (no recipe) keep their rounded inputs in the file."""
    fmt = format_of("float16")
    cases = FAMILIES["gaussian"].cases("softmax", fmt, "quick")
    fam = prepare.PreparedFamily([prepare.Prepared(c, fmt, i) for i, c in enumerate(cases)])
    _store.save(tmp_path / "f.pkl", fam)
    back = _store.load(tmp_path / "f.pkl")
    assert all(_same(b.inputs, pc.inputs) for pc, b in zip(fam.prepared, back.prepared))
    inputs = sum(a.nbytes for pc in fam.prepared for a in pc.inputs.values())
    assert (tmp_path / "f.pkl").stat().st_size >= inputs


def test_packing_keeps_the_values_hi_alone_would_round_otherwise():
    """Where hi + lo rounds otherwise than hi alone (hi a float16 midpoint, lo deciding), a NaN with its sign set,
    -0.0, an overflow to inf: every array comes back bit for bit, and the rounded values are kept only where hi
    rounded to the dtype is not them."""
    hi, lo, value = np.full(100, 0.5), np.zeros(100), np.full(100, 0.5, np.float16)  # (most: hi rounds to them)
    hi[:6] = [1 + 2.0**-11, 1 + 2.0**-11, -0.0, np.nan, 65520.0, 0.3]
    lo[:2] = [2.0**-60, -(2.0**-60)]
    bits = [0x3C01, 0x3C00, 0x8000, 0xFE00, 0x7C00, 0x34CD]  # 1 + 2**-10, 1, -0, -NaN, inf, 0.3 (rounded by hand)
    value[:6] = np.array(bits, np.uint16).view(np.float16)
    ref = reference.Result(value, hi, lo, np.zeros(100), np.zeros(100, np.int8), np.zeros((), bool), None)
    packed = _packed.pack(ref, {})
    back = _packed.unpack(packed, {})
    for name in ("value", "hi", "lo", "undefined"):
        assert _same(getattr(back, name), getattr(ref, name)), name
    assert back.fine is None and list(packed[0].at) == [0, 3]  # kept: the first value and the NaN's sign


def test_a_reference_of_mostly_exact_zeros_is_kept_sparse_bit_for_bit():
    """hi of rows that are exactly 0 (cross-entropy's ignored rows) is kept as the elements that are not +0, and
    comes back with every bit: a -0.0 among the zeros, a subnormal, a NaN."""
    hi = np.zeros((4, 1000))
    hi[1] = np.linspace(-1, 1, 1000)
    hi[0, 5], hi[2, 7], hi[3, 9] = -0.0, 5e-324, np.nan
    value = hi.astype(np.float32)
    ref = reference.Result(value, hi, np.zeros_like(hi), np.zeros(4), np.zeros(4, np.int8), np.zeros(4, bool), None)
    packed = _packed.pack(ref, {})
    assert isinstance(packed[1], _packed.Sparse) and len(packed[1].at) == 1000 + 3  # row 1 and 3 more
    back = _packed.unpack(packed, {})
    for name in ("value", "hi", "lo"):
        assert _same(getattr(back, name), getattr(ref, name)), name


def _result(hi: np.ndarray, lo: np.ndarray, dtype) -> reference.Result:
    with np.errstate(all="ignore"):
        value = (hi + lo).astype(dtype)
    rows = hi.shape[:-1]
    return reference.Result(value, hi, lo, np.zeros(rows), np.zeros(rows, np.int8), np.zeros(rows, bool), None)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("shape", [(6, 32000), (64, 5000)])  # (long rows: an index over every key; short: a search)
def test_a_sixteen_bit_row_is_kept_by_its_inputs_bit_for_bit(dtype, shape):
    """Within a row, an output that is a function of the input at the same place (softmax's e**(x_j - m) / s) is kept
    as a table over (row, the input's bits) and the elements that break the rule (a target's entry, a -0.0 where the
    table says +0, a NaN with a payload): every bit comes back, from the case's own inputs, in far fewer bytes than
    the array; rows with the same logits but another scale stay apart."""
    rng = np.random.default_rng(5)
    x = round_to(np.round(rng.standard_normal(shape) * 12) / 4, np.dtype(dtype)).astype(np.float64)  # (about 90 values)
    x[3] = x[2]  # the same logits, another row: its own table entries
    hi = np.exp(x - x.max(axis=1, keepdims=True)) * np.arange(1.0, shape[0] + 1)[:, None]
    lo = hi * 2.0**-60 * np.where(x > 0, 1.0, -0.75)
    hi[:, 7] -= 1.0  # a target's entry: p_y - 1
    hi[0, :3] = 0.0
    hi[0, 2] = -0.0
    hi[1, 9] = np.array(0x7FF8_0000_0000_0ABC, np.uint64).view(np.float64)
    ref = _result(hi, lo, dtype)
    inputs = {"x": round_to(x, np.dtype(dtype)), "target": np.zeros(shape[0], np.int64)}
    packed = _packed.pack(ref, inputs)
    assert isinstance(packed[1], _packed.ByInput) and isinstance(packed[2], _packed.ByInput)
    assert _packed.nbytes(packed[1]) < hi.nbytes / 10
    back = _packed.unpack(packed, inputs)
    for name in ("value", "hi", "lo", "undefined"):
        assert _same(getattr(back, name), getattr(ref, name)), name
    assert _same(_packed.unpack(_packed.pack(ref, {}), {}).hi, hi)  # (without the inputs: another form, same bits)


def test_an_array_of_few_exponents_is_deflated_and_one_of_random_bits_is_not():
    """A correction whose values take a few exponents and short significands deflates; float64 numbers with random
    significands do not, and stay whole; both come back bit for bit."""
    rng = np.random.default_rng(6)
    hi = rng.standard_normal((4, 8192))
    lo = np.ldexp(rng.integers(-8, 8, hi.shape) / 8, -60)  # (3 significant bits, 2 exponents)
    ref = _result(hi, lo, np.float32)
    packed = _packed.pack(ref, {})
    assert isinstance(packed[1], np.ndarray) and isinstance(packed[2], _packed.Deflated)
    assert _packed.nbytes(packed[2]) < lo.nbytes / 4
    back = _packed.unpack(packed, {})
    assert _same(back.hi, hi) and _same(back.lo, lo) and _same(back.value, ref.value)


@pytest.mark.parametrize(
    ("family", "kind", "dtype", "at_most"),
    [
        ("ce_gaussian", "cross_entropy_grad", "float16", 0.3),  # by input: 10,800 values in a row of 32,003
        ("long", "log_softmax", "bfloat16", 0.1),  # by input: a row of 65,536 bfloat16 logits has 2,518 values
        ("long", "log_softmax", "float32", 0.5),  # deflated: its corrections' few exponents
        ("long", "softmax", "float64", 0.9),
    ],
)
def test_a_default_family_is_kept_compactly_and_read_back_exactly(tmp_path, family, kind, dtype, at_most):
    """The default suite's families the compact forms were made for: the file holds at most a share of the whole
    hi and lo arrays (lo where it is not 0), and every reference comes back with every bit."""
    computed = _built_in(family, kind, dtype, suite="default")
    _store.save(tmp_path / "f.pkl", computed)
    kept = _store.load(tmp_path / "f.pkl")
    refs = [r for pc in computed.prepared for r in pc.references]
    whole = sum(r.hi.nbytes + (r.lo.nbytes if r.lo.any() else 0) for r in refs)
    assert (tmp_path / "f.pkl").stat().st_size <= at_most * whole
    for pc, back in zip(computed.prepared, kept.prepared):
        for ref, again in zip(pc.references, back.references):
            for name in ("value", "hi", "lo", "undefined", "fine"):
                assert _same(getattr(ref, name), getattr(again, name)), (pc.case.description, name)
