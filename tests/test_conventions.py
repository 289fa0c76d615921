"""Declared conventions: a candidate that declares the causal or window alignment it implements (top-left, as
jax.nn.dot_product_attention and PyTorch SDPA document theirs) is judged against that convention's exact result; a
mismatch with its declaration stays a defect (FlashAttention #951), an undeclared one is judged against the default
(bottom-right) and the note names the convention its output matches; a bad declaration is one clear error."""

import mpmath
import numpy as np
import pytest

import softaudit
from softaudit import kinds
from softaudit.adapters import Candidate
from softaudit.candidates import attention as builtin
from softaudit.cases import Case
from softaudit.prepare import Prepared
from softaudit.reference import format_of


def _top_left_keep(lq, lk, window=None):
    """Which keys query i may attend, aligned top-left: j <= i (causal), or i - left <= j <= i + right (window)."""
    i, j = np.arange(lq)[:, None], np.arange(lk)[None, :]
    if window is None:
        return j <= i
    left, right = window
    return ((j >= i - left) | (left < 0)) & ((j <= i + right) | (right < 0))


def _top_left(q, k, v, mask=None, *, causal=False, window=None):
    """Best practice (softaudit's upcast) with the causal limit and the window aligned top-left: query i against key
    i itself, as jax.nn.dot_product_attention and PyTorch SDPA's is_causal align them."""
    lq, lk = q.shape[-2], k.shape[-2]
    keep = np.ones((lq, lk), bool) if mask is None else mask
    if causal:
        keep = keep & _top_left_keep(lq, lk)
    if window is not None:
        keep = keep & _top_left_keep(lq, lk, window)
    return builtin.upcast(q, k, v, keep)


def _bottom_right(q, k, v, mask=None, *, causal=False, window=None):
    """Best practice with the default, bottom-right alignment (key j against query i + Lk - Lq)."""
    return builtin.upcast(q, k, v, mask, causal=causal, window=window)


def _marked(fn, name, conventions=None):
    def call(q, k, v, mask=None, *, causal=False, window=None):
        return fn(q, k, v, mask, causal=causal, window=window)

    call.__name__ = call.__qualname__ = name
    return softaudit.candidate(call, kind="attention", name=f"test.{name}", conventions=conventions)


declared_top_left = _marked(_top_left, "declared_top_left", {"causal": "top_left", "window": "top_left"})
undeclared_top_left = _marked(_top_left, "undeclared_top_left")
# FlashAttention #951: documented (declared) bottom-right, computing top-left.
declared_bottom_right_but_top_left = _marked(_top_left, "flash_attention_951", {"causal": "bottom_right"})
declared_top_left_but_bottom_right = _marked(
    _bottom_right, "declared_top_left_but_bottom_right", {"causal": "top_left"}
)


def _audit(targets, families, dtypes=("float32",), **options):
    return softaudit.audit(
        targets,
        kind=options.pop("kind", "attention"),
        families=families,
        dtypes=list(dtypes),
        suite="quick",
        isolation="none",
        **({"cache_dir": None} | options),
    ).table


def _rows(table, name):
    return table[table.candidate == f"test.{name}"]


def test_a_declared_top_left_kernel_passes_and_says_what_it_was_judged_against(tmp_path):
    # The declared and the undeclared kernel in one audit, with a cache folder: the declared convention's exact
    # results are prepared and kept apart from the defaults' (an undeclared kernel read the declared ones, or the
    # other way round, would pass where it fails).
    table = _audit(
        [declared_top_left, undeclared_top_left],
        ["attn_causal", "attn_window", "attn_gaussian"],
        dtypes=("float16", "float32"),
        cache_dir=tmp_path,
    )
    declared, undeclared = _rows(table, "declared_top_left"), _rows(table, "undeclared_top_left")
    assert set(declared.verdict) == {"pass"}, declared[["dtype", "family", "note"]]
    notes = dict(zip(declared.dtype + " " + declared.family, declared.note))
    assert notes["float32 attn_causal"] == "judged against its declared top-left causal alignment"
    assert notes["float32 attn_window"] == "judged against its declared top-left window alignment"
    assert notes["float32 attn_gaussian"] == ""  # (no case sets causal or a window: nothing declared applies)
    # The undeclared kernel is judged against the default, bottom-right, and its note names what it matches.
    failed = undeclared[undeclared.family != "attn_gaussian"]
    assert set(failed.verdict) == {"fail"}
    causal = failed[failed.family == "attn_causal"].note
    assert all("matches top-left causal, not bottom-right" in n for n in causal)
    assert all("conventions={'causal': 'top_left'}" in n for n in causal)
    assert all("aligned top-left, not bottom-right" in n for n in failed[failed.family == "attn_window"].note)
    assert set(undeclared[undeclared.family == "attn_gaussian"].verdict) == {"pass"}
    # Run again from the kept families: the same verdicts.
    again = _audit(
        [undeclared_top_left, declared_top_left],
        ["attn_causal", "attn_window", "attn_gaussian"],
        dtypes=("float16", "float32"),
        cache_dir=tmp_path,
    )
    for name in ("declared_top_left", "undeclared_top_left"):
        assert list(_rows(again, name).verdict) == list(_rows(table, name).verdict)


def test_a_kernel_that_breaks_its_declared_convention_fails():
    """FlashAttention #951: bottom-right documented, top-left computed. And the other way round, a kernel declared
    top-left that computes bottom-right: the note names the default it matches."""
    table = _audit([declared_bottom_right_but_top_left, declared_top_left_but_bottom_right], ["attn_causal"])
    flash = _rows(table, "flash_attention_951")
    assert set(flash.verdict) == {"fail"}
    assert set(flash.finding) == {"other_convention"}, flash.finding
    assert flash.note.iloc[0].startswith("judged against its declared bottom-right causal alignment; ")
    assert "matches top-left causal, not bottom-right" in flash.note.iloc[0]
    other = _rows(table, "declared_top_left_but_bottom_right")
    assert set(other.verdict) == {"fail"}
    assert "judged against its declared top-left causal alignment" in other.note.iloc[0]
    assert "matches the default bottom-right causal alignment, not its declared top-left" in other.note.iloc[0]


def test_the_declared_reference_is_mpmaths_top_left_result():
    """The reference of a case under a declared top-left causal limit and window, Lq != Lk, against mpmath at 300
    bits over the keys each query keeps top-left (written here from the definition, not from the code's mask)."""
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((1, 3, 4)), rng.standard_normal((1, 6, 4)), rng.standard_normal((1, 6, 2))
    fmt = format_of("float32")
    for options, conventions, keys in (
        ({"causal": True}, {"causal": "top_left"}, lambda i: range(i + 1)),
        ({"window": (1, 2)}, {"window": "top_left"}, lambda i: range(max(i - 1, 0), i + 3)),
        (
            {"causal": True, "window": (1, -1)},
            {"causal": "top_left", "window": "top_left"},
            lambda i: range(i - 1, i + 1),
        ),
    ):
        case = Case("attention", "t", {"q": q, "k": k, "v": v}, None, None, "t", options=options)
        pc = Prepared(case, fmt, 0, conventions=tuple(conventions.items()))
        qr, kr, vr = (pc.inputs[n].astype(np.float64) for n in ("q", "k", "v"))
        want = np.empty((1, 3, 2))
        with mpmath.workprec(300):
            for i in range(3):
                kept = [j for j in keys(i) if 0 <= j < 6]
                s = [
                    mpmath.fsum(mpmath.mpf(float(a)) * mpmath.mpf(float(b)) for a, b in zip(qr[0, i], kr[0, j])) / 2
                    for j in kept
                ]
                w = [mpmath.exp(x) for x in s]
                for c in range(2):
                    value = mpmath.fsum(wj * mpmath.mpf(float(vr[0, j, c])) for wj, j in zip(w, kept)) / mpmath.fsum(w)
                    with mpmath.workprec(24):
                        want[0, i, c] = float(+value)
        got = pc.reference.value.astype(np.float64)
        assert np.array_equal(got, want), (options, got, want)
        # The default alignment (bottom-right: key j against query i + 3) keeps other keys: a different result.
        default = Prepared(case, fmt, 0).reference.value
        assert not np.array_equal(default, got)


@pytest.mark.parametrize(
    "conventions, message",
    [
        ({"causal": "topleft"}, "convention causal='topleft' for attention is not one of 'bottom_right' or 'top_left'"),
        ({"casual": "top_left"}, "unknown convention 'casual' for attention; it declares causal: bottom_right or"),
        ("top_left", "conventions is a dict of name -> value, as {'causal': 'top_left'}, got 'top_left'"),
    ],
)
def test_a_bad_declaration_is_one_clear_error(conventions, message):
    def kernel(q, k, v, mask=None):
        return builtin.upcast(q, k, v, mask)

    with pytest.raises(ValueError) as marked:
        softaudit.candidate(kernel, kind="attention", conventions=conventions)
    with pytest.raises(ValueError) as made:
        Candidate("attention", "kernel", kernel, conventions=conventions)
    for raised in (marked, made):
        assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_kind_without_conventions_refuses_a_declaration():
    with pytest.raises(ValueError, match=r"^softmax has no conventions to declare \(got conventions=\{'causal'"):
        softaudit.candidate(lambda x, axis=-1: x, kind="softmax", conventions={"causal": "top_left"})


def test_a_bad_declaration_in_a_target_file_is_one_line_from_the_cli(tmp_path):
    from click.testing import CliRunner

    from softaudit.cli import main

    target = tmp_path / "kernel.py"
    target.write_text(
        "import softaudit\n\n"
        "@softaudit.candidate(kind='attention', conventions={'causal': 'top-left'})\n"
        "def attend(q, k, v, mask=None):\n"
        "    return q\n"
    )
    result = CliRunner().invoke(main, ["run", str(target), "--dtype", "float32", "--suite", "quick"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "convention causal='top-left' for attention is not one of" in lines[0], result.output


def test_declarations_are_the_same_pairs_however_written():
    def kernel(q, k, v, mask=None):
        return q

    a = Candidate("attention", "a", kernel, conventions={"window": "top_left", "causal": "top_left"})
    b = Candidate("attention", "a", kernel, conventions=(("causal", "top_left"), ("window", "top_left")))
    assert a.conventions == b.conventions == (("causal", "top_left"), ("window", "top_left"))
    assert hash(a) == hash(b)
    kind = kinds.get("attention")
    assert kind.departures(a.conventions, {"causal": True}) == (("causal", "top_left"),)
    assert kind.departures((("causal", "bottom_right"),), {"causal": True}) == ()  # (the default: nothing changes)


def test_jax_and_torch_declare_their_documented_alignment_and_pass():
    """jax.nn.dot_product_attention's is_causal and local_window_size, and SDPA's is_causal, are documented top-left:
    judged against that, they pass where the default alignment failed them."""
    pytest.importorskip("jax")
    pytest.importorskip("torch")
    targets = [
        "softaudit.frameworks.jax:dot_product_attention_modified",
        "softaudit.frameworks.torch:sdpa_causal_math",
    ]
    table = _audit(targets, ["attn_causal", "attn_window"])
    ran = table[table.verdict != "skip"]
    assert set(ran.candidate) == {"jax.nn.dot_product_attention_modified", "torch.sdpa_causal_math"}
    assert set(ran.verdict) == {"pass"}, ran[["candidate", "family", "note"]]
    assert all(n.startswith("judged against its declared top-left") for n in ran.note)
    # The window family does not reach SDPA's is_causal candidate (it takes no window): a skip, as before.
    assert set(table[table.candidate == "torch.sdpa_causal_math"].family[table.verdict == "skip"]) == {"attn_window"}


def test_the_hunt_judges_an_input_against_the_declared_convention():
    """softaudit hunt judges each input as run judges a family: a top-left kernel's causal input passes where it
    declares top-left and fails where it declares nothing."""
    from softaudit.execute import executor
    from softaudit.hunt._engine import judge
    from softaudit.policy import Policy

    rng = np.random.default_rng(3)
    inputs = {
        "q": rng.standard_normal((1, 4, 16)),
        "k": rng.standard_normal((1, 9, 16)),
        "v": rng.standard_normal((1, 9, 16)),
    }
    fmt = format_of("float32")
    verdicts = {}
    with executor("none") as ex:
        for target in (declared_top_left, undeclared_top_left):
            (found,) = softaudit.adapters.load_target(target, "attention")
            verdict, reasons, *_ = judge(found, "attention", fmt, inputs, None, {"causal": True}, Policy(), None, ex)
            verdicts[found.name] = (verdict, reasons)
    assert verdicts["test.declared_top_left"][0] == "pass"
    verdict, reasons = verdicts["test.undeclared_top_left"]
    assert verdict == "fail" and any("matches top-left causal, not bottom-right" in r for r in reasons)
