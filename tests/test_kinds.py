"""A kind is one object in one registry (softaudit.kinds): every entry complete, and nothing branching on a name."""

import re
from pathlib import Path

import numpy as np
import pytest

import softaudit
from softaudit import candidates, kinds
from softaudit.cases import FAMILIES, families_for
from softaudit.kinds import KINDS, Kind

PACKAGE = Path(softaudit.__file__).parent
#: The kinds coming next (issue 12): a literal of theirs outside the registry would be a branch on a name as well.
COMING = ("softmax_grad", "log_softmax_grad", "logsumexp_grad", "masked_softmax_grad", "attention_grad")
PARTS = ("reference", "conditioning", "element_inputs")
INVARIANTS = ("shift", "permutation", "monotonic", "lse_below_max", "masked_values", "masked_equals_kept")
MEASURES = ("negative", "sum_err", "argmax_flips", "max_ulp_vsum", "max_normwise", "sum_zero")


def _convention(kind: Kind) -> str:
    keywords = [{"axis": "axis=-1", "mask": "mask=None"}[k] for k in kind.keywords]
    return f"f({', '.join(list(kind.arguments) + keywords)})"


@pytest.mark.parametrize("kind", KINDS.values(), ids=list(KINDS))
def test_every_kind_is_complete_and_consistent(kind):
    assert KINDS[kind.name] is kind and kinds.get(kind.name) is kind
    # the calling convention people read is the one the audit calls with
    assert kind.convention.startswith(_convention(kind)) and softaudit.KINDS is KINDS
    assert kind.inputs and set(kind.keywords) <= {"axis", "mask"} and kind.outputs
    assert not ({"mask"} <= set(kind.arguments) and "mask" in kind.keywords)
    args, kwargs = kind.call_arguments({name: name for name in kind.inputs}, "the mask")
    assert [a for a in args if a != "the mask"] == list(kind.inputs) and set(kwargs) == set(kind.keywords)
    # comparisons: built-ins of the kind, the plain one first among the standard ones, best practice apart
    builtins = {c.name: c for c in [*candidates.builtins(), *candidates.apart()]}
    for name in (kind.plain, kind.best, *kind.standard):
        assert name in builtins and builtins[name].kind == kind.name, name
    assert kind.standard[0] == kind.plain and kind.best not in kind.standard
    assert kind.best in kind.best_practice
    # families: registered, run in registration order, and listing the kind back
    assert kind.families and set(kind.families) <= set(FAMILIES)
    assert [f.name for f in families_for(kind.name)] == [n for n in FAMILIES if n in kind.families]
    assert all(kind.name in FAMILIES[n].kinds for n in kind.families)
    # the parts that are code are functions (a gradient kind's upstream g too), and the data attributes hold known
    # names
    for attribute in PARTS:
        assert callable(getattr(kind, attribute)), attribute
    assert (kind.upstream is not None) == ("g" in kind.inputs) and (kind.upstream is None or callable(kind.upstream))
    assert set(kind.invariants) <= set(INVARIANTS) and set(kind.measures) <= set(MEASURES)
    assert not kind.invariants or ("permutation" in kind.invariants and kind.row_wise)
    assert set(kind.causes) <= {"absorbed", "subnormal"}
    assert kind.reduction[0] in kind.inputs
    assert not kind.leak_probe or kind.masked


def test_every_kind_is_defined_whole_in_its_own_module():
    """Issue 25: each Kind(...) is made in a module named for its kind (a kind and its gradient may share one:
    cross_entropy), never in the private modules, which hold what several kinds share and the registry."""
    import ast

    made = {}
    for path in sorted((PACKAGE / "kinds").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            value = getattr(node, "value", None)
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Kind":
                made.setdefault(value.args[0].value, []).append(path.stem)
    paired = ("cross_entropy_grad", "linear_cross_entropy_grad")
    assert made == {name: [name.removesuffix("_grad")] if name in paired else [name] for name in KINDS}


def test_every_family_is_run_by_a_kind():
    assert all(family.kinds for family in FAMILIES.values())


def test_the_comparison_tables_read_the_kinds():
    assert {k.name: k.plain for k in KINDS.values()} == candidates.PLAIN
    assert {k.name: k.standard for k in KINDS.values()} == candidates.STANDARD
    assert {k.name: k.best for k in KINDS.values()} == candidates.BEST


def test_an_unknown_kind_is_one_line():
    message = (
        "unknown kind 'softmx'; known: softmax, log_softmax, logsumexp, masked_softmax, attention, attention_lse, "
        "cross_entropy, linear_cross_entropy, merge_attention, attention_fp8, quantize_fp8, "
        "softmax_grad, log_softmax_grad, logsumexp_grad, masked_softmax_grad, attention_grad, attention_sinks_grad, "
        "cross_entropy_grad, linear_cross_entropy_grad"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        kinds.get("softmx")
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        softaudit.candidate(len, kind="softmx")
    with pytest.raises(ValueError, match=r"^unknown kind"):
        kinds.get(["softmax"])


def test_a_reference_has_one_result_per_output():
    from softaudit.reference import format_of
    from softaudit.runner import Prepared

    for kind in KINDS.values():
        fmt = format_of(kind.dtypes[0] if kind.dtypes else "float32")  # (a kind audited in some dtypes only)
        case = FAMILIES[kind.families[0]].cases(kind.name, fmt, "quick")[0]
        pc = Prepared(case, fmt, 0)
        assert len(pc.references) == len(pc.bases) == len(pc.output_shapes) == len(kind.outputs)


NAMES = "|".join(map(re.escape, (*KINDS, *COMING)))
#: Ways a module branches on a kind's name: a comparison, a membership test, a table of kinds or keyed by kind.
BRANCHES = [
    re.compile(rf"""(?:==|!=)\s*["'](?:{NAMES})["']"""),
    re.compile(rf"""["'](?:{NAMES})["']\s*(?:==|!=)"""),
    re.compile(rf"""\bin\s*[(\[{{][^)\]}}]*["'](?:{NAMES})["']"""),
    re.compile(rf"""=\s*[(\[]\s*["'](?:{NAMES})["']\s*,"""),
    re.compile(rf"""^\s*["'](?:{NAMES})["']\s*:"""),
]
#: Where a kind's name may stand: the registry itself, the reference's public API (its functions are one per kind,
#: and one table maps the row kinds' names to the formula objects its engines evaluate), and the rounding budgets'
#: table (a formula of each kind's standard algorithm, by name; a kind it does not name has none), and the bug models
#: (each a kind's standard algorithm with one mistake, by the kind's name; a kind with none goes unexplained).
ALLOWED = ("kinds/", "reference/__init__.py", "budget.py", "candidates/bugs/")
#: Lines outside those that still name a kind, each with its reason: none today.
REMAINING: dict[tuple[str, str], str] = {}


def test_no_module_outside_the_registry_branches_on_a_kind_name():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(ALLOWED):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(p.search(line) for p in BRANCHES) and (relative, line.strip()) not in REMAINING:
                found.append(f"{relative}:{number}: {line.strip()}")
    assert not found, "branches on a kind's name (ask the kind, softaudit/kinds/):\n" + "\n".join(found)


def test_the_branch_finder_finds_branches():
    lines = [
        'if kind == "attention":',
        'if candidate.kind != "logsumexp" and x:',
        'if kind in ("softmax", "log_softmax"):',
        'ROW_KINDS = ("softmax", "log_softmax")',
        '    "attention": "scores in float32",',
        'per_row = kind not in ["logsumexp"]',
        'if kind == "attention_grad":',
    ]
    assert all(any(p.search(line) for p in BRANCHES) for line in lines)
    innocent = [
        'candidate(f, kind="attention", name="x")',
        'if dtype.kind == "f":',
        'name="softmax.max_shifted"',
        "if kind == wanted:",
    ]
    assert not any(p.search(line) for p in BRANCHES for line in innocent)


def test_a_kind_with_several_outputs_is_called_for_a_tuple_of_them():
    """attention_grad returns (dq, dk, dv): the call path carries one array per output and checks each."""
    import dataclasses

    from softaudit.adapters import _call
    from softaudit.adapters._call import CandidateError

    several = dataclasses.replace(KINDS["softmax"], name="pair", outputs=("a", "b"))
    kinds.KINDS["pair"] = several
    try:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        pair = softaudit.Candidate("pair", "pair", lambda x, axis=-1: (x, x.astype(np.float64)))
        (a, b), note = _call.call_all(pair, {"x": x}, None, ((2, 3), (2, 3)), np.float32, None)
        assert (
            a.dtype == b.dtype == np.float32 and np.array_equal(a, x) and note == "b: returned float64, cast to float32"
        )
        one = softaudit.Candidate("pair", "one", lambda x, axis=-1: x)
        with pytest.raises(CandidateError, match=r"^returned ndarray, not a tuple \(a, b\)$"):
            _call.call_all(one, {"x": x}, None, ((2, 3), (2, 3)), np.float32, None)
        three = softaudit.Candidate("pair", "three", lambda x, axis=-1: (x, x, x))
        with pytest.raises(CandidateError, match=r"^returned 3 arrays, expected 2 \(a, b\)$"):
            _call.call_all(three, {"x": x}, None, ((2, 3), (2, 3)), np.float32, None)
        with pytest.raises(CandidateError, match=r"^b: returned shape \(2, 3\), expected \(3,\)$"):
            _call.call_all(pair, {"x": x}, None, ((2, 3), (3,)), np.float32, None)
    finally:
        del kinds.KINDS["pair"]


def test_the_layers_above_keep_their_own_tables_of_the_kinds(monkeypatch):
    """The hunt draws each kind by its shape, the causes read a NaN by it, and the budgets know every kind (by name:
    a budget is a formula of the kind's standard algorithm); a kind whose inputs the hunt does not draw (class
    labels beside rows of x) gets no strategy, and the hunt says so in one line."""
    import dataclasses

    from softaudit import budget, causes
    from softaudit.hunt import _engine, _strategies
    from softaudit.reference import format_of

    drawn = {name: getattr(_strategies.for_kind(kind), "__name__", None) for name, kind in KINDS.items()}
    assert drawn == {
        "softmax": "rows",
        "log_softmax": "rows",
        "logsumexp": "rows",
        "masked_softmax": "rows",
        "attention": "attention",
        "softmax_grad": "gradients",
        "log_softmax_grad": "gradients",
        "logsumexp_grad": "gradients",
        "masked_softmax_grad": "gradients",
        "attention_grad": "gradients",
        "attention_sinks_grad": "gradients",
        "cross_entropy": "cross_entropy",
        "cross_entropy_grad": "cross_entropy",
        "linear_cross_entropy": "linear_cross_entropy",
        "linear_cross_entropy_grad": "linear_cross_entropy",
        "merge_attention": "merge",
        "attention_lse": "attention",
        "attention_fp8": None,  # (FP8 inputs with their descales: not drawn)
        "quantize_fp8": None,
    }
    assert set(budget.BUDGETS) == set(KINDS)
    with pytest.raises(ValueError, match=r"^the hunt has no strategy for attention_fp8: [^\n]*$"):
        _engine._strategy("attention_fp8")
    labels = dataclasses.replace(KINDS["softmax"], name="labels", arguments=("x", "target"))
    monkeypatch.setitem(kinds.KINDS, "labels", labels)
    assert _strategies.for_kind(labels) is None
    with pytest.raises(ValueError, match=r"^the hunt has no strategy for labels: [^\n]*$"):
        _engine._strategy("labels")
    f16 = format_of("float16")
    row, query = {"x": np.array([[1e5, 0.0]])}, {"q": np.full((1, 4), 300.0), "k": np.full((3, 4), 300.0)}
    assert causes.diagnose("softmax_grad", f16, row, None) == causes.diagnose_row(f16, row, None) != ("", "")
    assert causes.diagnose("attention_grad", f16, query, None) == causes.diagnose_scores(f16, query, None) != ("", "")


def test_a_kind_without_a_budget_still_gets_a_cause(monkeypatch):
    """A kind the rounding budgets do not name has an unknown budget: its worst element still gets a cause, read
    against the conditioning scale alone, rather than an error."""
    import dataclasses

    import softaudit

    softmax = KINDS["softmax"]
    # (softmax under another name: the reference evaluates softmax's formula, as a kind of its own would its own)
    unbudgeted = dataclasses.replace(
        softmax, name="unbudgeted", reference=lambda kind, *args: softmax.reference(softmax, *args)
    )
    monkeypatch.setitem(kinds.KINDS, "unbudgeted", unbudgeted)
    for table in (candidates.PLAIN, candidates.STANDARD, candidates.BEST, candidates.PRACTICE):
        monkeypatch.setitem(table, "unbudgeted", table["softmax"])

    def off(x, axis=-1):
        e = np.exp(x - x.max(axis, keepdims=True))
        return (e / e.sum(axis, keepdims=True) * 1.01).astype(x.dtype)

    audited = softaudit.audit(
        softaudit.Candidate("unbudgeted", "off", off),
        dtypes=["float32"],
        suite="quick",
        families=["gaussian"],
        isolation="none",
        cache=False,
    )
    (row,) = audited.table.itertuples()
    assert row.verdict == "fail" and row.cause in ("precision", "wrong_terms"), row
    assert row.note.split("worst element: ")[1], row.note


def test_the_kinds_taking_an_upstream_g_are_those_named_for_a_forward_with_grad():
    """The attention families size a gradient kind's cases by its name (kinds/_attention.py: the registry imports
    the family makers, so they cannot ask it): the name must say what the kind's upstream g says."""
    for name, kind in KINDS.items():
        assert (kind.upstream is not None) == name.endswith("_grad"), name
