"""attention_fp8 as a kind of the audit loop (`softaudit.audit`, `softaudit run`): the same verdicts and findings
as the standalone softaudit.fp8.audit_attention_fp8 on every built-in and family, the scheme declared on the
marking, o's dtype the audited one, and the reports and the gate on its rows."""

import json
import textwrap

import numpy as np
import pytest

import softaudit
from softaudit import fp8, gate
from softaudit.candidates import attention_fp8 as kernels
from softaudit.report import write_reports

FAMILIES = list(fp8.ATTENTION_FAMILIES)


def _audit(target, **kw):
    kw = {"dtypes": ["bfloat16"], "suite": "quick", "cache": False, "isolation": "none", "workers": 1} | kw
    return softaudit.audit(target, **kw)


@pytest.fixture(scope="module")
def looped():
    return _audit("softaudit.candidates.attention_fp8").table


@pytest.mark.parametrize("name", list(kernels.BUILTINS))
def test_the_loop_gives_the_standalone_verdicts_and_causes(looped, name):
    f, scheme, _ = kernels.BUILTINS[name]
    alone = fp8.audit_attention_fp8(f, scheme=scheme, name=name).set_index("family")
    rows = looped[looped.candidate == name].set_index("family")
    assert list(rows.index) == FAMILIES
    for family in FAMILIES:
        assert rows.loc[family, "verdict"] == alone.loc[family, "verdict"], family
        if alone.loc[family, "cause"]:
            assert rows.loc[family, "finding"] == alone.loc[family, "cause"], family


@pytest.mark.parametrize("family", ["fp8_heads", "fp8_masks"])
def test_the_loop_measures_what_the_standalone_audit_does(family):
    """The same case, the same output: the loop's max_cond_err (its reference, conditioning scale and basis) is the
    standalone's |o - exact| / (u (|o| + sum p|v|))."""
    import ml_dtypes

    from softaudit.cases import FAMILIES as CASE_FAMILIES
    from softaudit.metrics import measure
    from softaudit.prepare import Prepared
    from softaudit.reference import format_of

    fmt = format_of("bfloat16")
    for i, case in enumerate(CASE_FAMILIES[family].cases("attention_fp8", fmt, "quick")):
        pc = Prepared(case, fmt, i)
        assert all(pc.inputs[n] is not None and pc.inputs[n].dtype == a.dtype for n, a in case.arrays.items())
        y = kernels.stale_max(*(case.arrays[n] for n in fp8.ATTENTION_ARGUMENTS), case.mask)
        alone, _ = fp8._cond_err(fp8._exact(dict(case.arrays), case.mask, ml_dtypes.bfloat16), y)
        assert measure(pc.basis, y, case_index=i).max_cond_err == pytest.approx(alone, rel=1e-12, abs=1e-300)


def test_sound_kernels_pass_and_the_defects_fail_with_their_findings(looped):
    for name, (_, _, sound) in kernels.BUILTINS.items():
        verdicts = set(looped[looped.candidate == name].verdict)
        assert verdicts == {"pass"} if sound else "fail" in verdicts, name
    dropped = looped[looped.candidate == "attention_fp8.dropped_descale"]
    assert set(dropped.verdict) == {"fail"} and set(dropped.finding) == {"dropped_descale"}
    stale = looped[(looped.candidate == "attention_fp8.stale_max") & (looped.family == "fp8_stale_max")]
    assert stale.verdict.item() == "fail" and stale.finding.item() == "stale_max"


def test_the_note_says_which_scheme_judged_the_row(looped):
    fa3 = looped[looped.candidate == "attention_fp8.fa3"].note.iloc[0]
    assert "judged against its declared P in e4m3 with offset 8 FP8 scheme" in fa3
    stale = looped[(looped.candidate == "attention_fp8.stale_max") & (looped.family == "fp8_stale_max")].iloc[0]
    said = f"P in e4m3 with offset 8 explains {stale.plain_cond_err:.3g} of {stale.max_cond_err:.3g} x the conditioning"
    assert said in stale.note
    undeclared = looped[looped.candidate == "attention_fp8.scheme_best"].note.iloc[0]
    assert "no FP8 scheme declared: judged against P in float32" in undeclared


def test_a_users_module_declares_its_scheme_on_the_marking(tmp_path, monkeypatch):
    """FlashAttention 3's P-in-e4m3 kernel passes declared as what it is and fails declared as P in bfloat16 (on
    the families where the standalone audit fails it), whether declared by scheme= or by fp8.declare."""
    (tmp_path / "mine.py").write_text(
        textwrap.dedent(
            """
            import softaudit
            from softaudit import fp8
            from softaudit.candidates.attention_fp8 import kernel

            @softaudit.candidate(kind="attention_fp8", scheme="p_bf16")
            def claims_bf16(*args, mask=None):
                return kernel(*args, mask)

            @softaudit.candidate(kind="attention_fp8")
            @fp8.declare("fa3")
            def declared_fa3(*args, mask=None):
                return kernel(*args, mask)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    table = _audit("mine", families=["fp8_gqa", "fp8_stale_max"]).table.set_index(["candidate", "family"])
    assert table.loc[("mine:claims_bf16", "fp8_gqa"), "verdict"] == "fail"
    assert table.loc[("mine:claims_bf16", "fp8_stale_max"), "verdict"] == "pass"  # (the standalone's too)
    assert set(table.loc["mine:declared_fa3"].verdict) == {"pass"}


def test_scheme_is_checked_in_one_line():
    with pytest.raises(ValueError, match=r"^scheme offset 9 puts P past float8_e4m3fn's largest value$"):
        softaudit.candidate(len, kind="attention_fp8", scheme={"p": "float8_e4m3fn", "offset": 9})
    with pytest.raises(ValueError, match=r"^softmax has no FP8 scheme to declare \(scheme= is for attention_fp8\)$"):
        softaudit.candidate(len, kind="softmax", scheme="fa3")
    with pytest.raises(ValueError, match=r"^unknown scheme 'fa4'"):
        softaudit.candidate(len, kind="attention_fp8", scheme="fa4")


def test_dtype_is_os_dtype():
    """A bfloat16 o is a skip in float32 (not judged in float32's units); float64 is no dtype of o."""
    table = _audit("softaudit.candidates.attention_fp8:fa3", dtypes=["float32"], families=["fp8_gqa"]).table
    assert table.verdict.item() == "skip"
    assert "returns bfloat16, less precise than float32: audited with --dtype bfloat16" in table.note.item()
    said = r"^attention_fp8 is audited in bfloat16, float16 or float32 \(its output's dtype\); --dtype named float64$"
    with pytest.raises(ValueError, match=said):
        _audit("softaudit.candidates.attention_fp8:fa3", dtypes=["float64"])
    # (beside another kind's candidates, a kind with none of its dtypes named is left out)
    both = ["softaudit.candidates.attention_fp8:fa3", "softaudit.candidates.merge_attention:textbook"]
    table = _audit(both, dtypes=["float64"], families=["fp8_gqa", "merge_many"]).table
    assert set(table.kind) == {"merge_attention"}


def test_reports_and_the_gate_read_fp8_rows(tmp_path):
    result = _audit(
        ["softaudit.candidates.attention_fp8:fa3", "softaudit.candidates.attention_fp8:stale_max"],
        families=["fp8_stale_max"],
    )
    written = write_reports(result, tmp_path, formats=("md", "json", "junit", "csv"))
    assert {p.suffix for p in written} >= {".md", ".json", ".xml", ".csv"}
    md = next(p for p in written if p.suffix == ".md").read_text()
    assert "attention_fp8.stale_max" in md and "stale_max" in md
    rows = json.loads(next(p for p in written if p.suffix == ".json").read_text())
    assert rows  # (the json report holds the rows)
    baseline = gate.baseline_of(result)
    path = gate.write_baseline(result, tmp_path / "baseline.json")
    assert not gate.compare(gate.read_baseline(path), baseline).failed
    # a kernel that passed and now fails is a regression
    worse = json.loads(json.dumps(baseline))
    key = next(k for k in worse["rows"] if "attention_fp8.fa3" in k)
    baseline["rows"][key]["verdict"] = "fail"
    assert gate.compare(worse, baseline).failed


# ------------------------------------------------------------------------------------------------- quantize_fp8

QUANTIZE_CAUSES = {
    "amax_too_small": "amax_too_small",
    "zero_amax": "unguarded_scale",
    "scale_overflow": "unguarded_scale",
}


@pytest.fixture(scope="module")
def quantized():
    return _audit("softaudit.candidates.quantize_fp8", dtypes=["float8_e4m3fn", "float8_e5m2"]).table


@pytest.mark.parametrize(
    "name", ["quantize_fp8.textbook", "quantize_fp8.power_of_two", "quantize_fp8.wrong_axis", "quantize_fp8.unguarded"]
)
def test_the_loop_gives_the_standalone_quantize_verdicts_and_causes(quantized, name):
    """A loop row is a (format, granularity) over the five cases, x8 and descale apart; the standalone's rows are
    per case: the worst of each side agrees, and a failing row's finding is the model of the standalone's cause."""
    from softaudit.candidates import quantize_fp8 as steps
    from softaudit.results import SEVERITY

    f, two, _ = steps.BUILTINS[name]
    alone = fp8.audit_quantize_fp8(f, power_of_two=two)
    rows = quantized[quantized.candidate == name]
    assert len(rows) == 2 * 3 * 2  # (formats x granularities x outputs)
    for (fmt, granularity), cases in alone.groupby(["dtype", "granularity"]):
        mine = rows[(rows.dtype == fmt) & (rows.family == f"quantize_{granularity}")]
        assert max(mine.verdict, key=SEVERITY.get) == max(cases.verdict, key=SEVERITY.get), (fmt, granularity)
        causes = {QUANTIZE_CAUSES[c.split(":")[0]] for c in cases.cause if c}
        assert set(mine.finding[mine.verdict == "fail"]) <= causes and (not causes or set(mine.finding) & causes)


def test_quantize_outputs_are_measured_in_their_own_formats(quantized):
    """x8 in the FP8 format's steps, the descale in float32's: the exact step reads at most half a step, and the
    rows are keyed by the audited FP8 format."""
    exact = quantized[quantized.candidate == "quantize_fp8.scaled_exact"]
    assert set(exact.output) == {"x8", "descale"} and set(exact.dtype) == {"float8_e4m3fn", "float8_e5m2"}
    assert (exact.max_ulp <= 0.5).all() and set(exact.verdict) == {"pass"}
    two = quantized[quantized.candidate == "quantize_fp8.power_of_two"]
    assert (two[two.output == "descale"].max_ulp == 0).all()  # (a power of two's inverse is exact)
    assert "judged against its declared power-of-two scale" in two.note.iloc[0]


def test_the_command_line_runs_fp8_kernels_and_the_hunt_says_it_has_no_strategy(tmp_path):
    """`softaudit run` on FP8 kernels exits 0 for a sound one and 1 for a defect, with its reports; `softaudit hunt`
    says in one line that it cannot draw FP8 inputs (exit 2)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = os.environ | {"PYTHONPATH": str(root), "CI": "1"}

    def softaudit_(*args):
        command = [sys.executable, "-m", "softaudit", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    common = ["--suite", "quick", "--family", "fp8_stale_max", "--dtype", "bfloat16", "--cache-dir", "off", "-q"]
    sound = softaudit_("run", "softaudit.candidates.attention_fp8:fa3", "--out", "sound", *common)
    assert sound.returncode == 0, sound.stderr
    assert (tmp_path / "sound" / "results.csv").exists()
    defect = softaudit_("run", "softaudit.candidates.attention_fp8:stale_max", "--out", "defect", *common)
    assert defect.returncode == 1 and "stale_max" in defect.stdout
    hunt = softaudit_("hunt", "softaudit.candidates.attention_fp8:fa3")
    assert hunt.returncode == 2
    assert hunt.stderr.strip().splitlines()[-1] == (
        "Error: the hunt has no strategy for attention_fp8: its inputs are not ones it draws"
    )


# ------------------------------------------------------------------------------------- an FP8 KV cache in attention

CACHE_READER = """
import numpy as np
import softaudit
from softaudit.reference import round_to


def _attend(q, k, v, mask):
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


def _cache(k8, descale):
    return k8.astype(np.float64) * np.asarray(descale, np.float64)[..., None, None]


@softaudit.candidate(kind="attention")
def reads_cache(q, k, v, mask=None, k8=None, v8=None, descale_k=None, descale_v=None):
    if k8 is not None:
        k, v = _cache(k8, descale_k), _cache(v8, descale_v)
    return round_to(_attend(q, k, v, mask), q.dtype)


@softaudit.candidate(kind="attention")
def drops_v_descale(q, k, v, mask=None, k8=None, v8=None, descale_k=None, descale_v=None):
    if k8 is not None:
        k, v = _cache(k8, descale_k), v8.astype(np.float64)
    return round_to(_attend(q, k, v, mask), q.dtype)
"""


def test_an_fp8_kv_cache_reaches_the_attention_candidates_that_name_it(tmp_path, monkeypatch):
    """attn_fp8_kv_cache passes k8, v8 and their power-of-two descales beside k and v, their exact values in every
    dtype: a kernel that reads the cache passes where one that drops descale_v fails, and the built-ins, which do
    not name the cache, read k and v and pass."""
    from softaudit.cases import FAMILIES as CASE_FAMILIES
    from softaudit.prepare import Prepared
    from softaudit.reference import format_of
    from softaudit.reference import fp8 as _fp8

    for dtype in ("float16", "bfloat16", "float32", "float64"):
        for i, case in enumerate(CASE_FAMILIES["attn_fp8_kv_cache"].cases("attention", format_of(dtype), "quick")):
            pc = Prepared(case, format_of(dtype), i)
            assert pc.inputs["k8"].dtype.name == "float8_e4m3fn" and pc.inputs["descale_v"].dtype == np.float32
            for name in ("k", "v"):
                exact = _fp8.dequantize(pc.inputs[f"{name}8"], pc.inputs[f"descale_{name}"])
                assert np.array_equal(pc.inputs[name].astype(np.float64), exact), (dtype, name)
    (tmp_path / "cachek.py").write_text(CACHE_READER)
    monkeypatch.syspath_prepend(str(tmp_path))
    table = _audit(
        ["cachek", "softaudit.candidates.attention:naive", "softaudit.candidates.attention:upcast"],
        dtypes=["bfloat16", "float32"],
        families=["attn_fp8_kv_cache"],
    ).table.set_index(["candidate", "dtype"])
    assert set(table.loc["cachek:reads_cache"].verdict) == {"pass"}
    assert set(table.loc["cachek:drops_v_descale"].verdict) == {"fail"}
    assert set(table.loc["attention.naive"].verdict) == set(table.loc["attention.upcast"].verdict) == {"pass"}


def test_a_worst_inputs_json_keeps_the_fp8_inputs_in_their_own_formats():
    """A worst input's arrays kept in formats of their own (FP8 values, float32 descales, beside a bfloat16 row)
    come back from its JSON bit for bit in those formats, not rounded to the row's dtype."""
    import dataclasses

    import ml_dtypes

    from softaudit.results import WorstInput

    recipe = {"suite": "quick", "seed": 0, "family": "fp8_gqa", "case_index": 0}
    row = WorstInput(
        "c", None, "attention_fp8", "bfloat16", "fp8_gqa", "d", 0, [0, 0, 0, 0], 1, 1, 1, 0.5, 0.5, "", "", recipe
    )
    inputs = {
        "q8": np.array([[1.5, -448.0, 2.0**-9]], ml_dtypes.float8_e4m3fn),
        "descale_q": np.float32(0.0123).reshape(()),
        "q": np.array([1.5, 3.0], ml_dtypes.bfloat16),
        "mask": np.array([True, False]),
    }
    back = WorstInput.from_json(dataclasses.replace(row, inputs=inputs).as_json()).inputs
    for name, a in inputs.items():
        same = np.array_equal(back[name].reshape(-1).view(np.uint8), a.reshape(-1).view(np.uint8))
        assert back[name].dtype == a.dtype and same, name
