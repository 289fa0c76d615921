"""The command line: exit codes, one-line errors, configuration, the baseline gate, compare."""

import io
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from softaudit.cli import main

GOOD = """
import numpy as np
import softaudit

@softaudit.candidate(kind="softmax")
def kernel(x, axis=-1):
    w = x.astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(w - w.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)
"""
# A defect: no max shift, so exp overflows float16 past logits of about 11 and inf / inf is NaN (a fail).
BAD = GOOD.replace("w = x.astype(np.float64)", "w = x").replace(
    "np.exp(w - w.max(axis=axis, keepdims=True))", "np.exp(w)"
)
# A precision trade-off: exp and 1 / sum rounded to float16, the sum in float32 (a float16 sum of 65,536 equal
# exponentials overflows: a defect), below best practice in float16 (a warn).
PLAIN = GOOD.replace("w = x.astype(np.float64)", "w = x").replace(
    "return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)",
    "return e * (1 / e.sum(axis=axis, keepdims=True, dtype=np.float32)).astype(x.dtype)",
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernels.py").write_text(GOOD)
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_a_passing_run_exits_0_and_writes_every_report(project):
    r = invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out")
    assert r.exit_code == 0, r.output
    for name in ("results.csv", "worst.csv", "results.json", "summary.md", "junit.xml", "report.html"):
        assert (project / "out" / name).is_file(), name
    assert "17 pass, 0 warn, 0 fail, 0 error" in r.output  # softmax's 17 families (5 from reported bugs)


def test_a_failing_verdict_exits_1_and_says_the_cause_and_fix_even_when_quiet(project):
    (project / "kernels.py").write_text(BAD)
    r = invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out", "--format", "md", "-q")
    assert r.exit_code == 1
    assert "FAIL  kernels:kernel float16" in r.output and "no_max_shift: exp(x) is taken without" in r.output
    assert "fix: subtract the row max" in r.output
    assert "**FAIL**" in (project / "out" / "summary.md").read_text()


def test_a_warn_exits_0_and_fails_only_when_strict(project):
    (project / "kernels.py").write_text(PLAIN)
    args = ["run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out"]
    r = invoke(*args)
    assert r.exit_code == 0 and "0 fail, 0 error" in r.output and "WARN  kernels:kernel float16" in r.output
    # (a finding a bug model reproduces prints its fix; an unexplained one says so and gets none)
    assert "fix: " in r.output or "unexplained (no bug model reproduces the output)" in r.output
    quiet = invoke(*args, "-q")
    assert quiet.exit_code == 0 and quiet.output == ""  # quiet: nothing when the run passes
    strict = invoke(*args, "--strict", "-q")
    assert strict.exit_code == 1 and "WARN  kernels:kernel float16" in strict.output
    (project / "pyproject.toml").write_text("[tool.softaudit]\nstrict = true\n")
    assert invoke(*args).exit_code == 1


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "missing_module_xyz"], "module 'missing_module_xyz' does not import"),
        (["run", "kernels.py", "--dtype", "float13"], "unknown dtype 'float13'"),
        (["run", "kernels.py", "--cases", "nope.npy"], "no such case file"),
        (["run", "kernels.py", "--baseline", "nope.json"], "no such baseline"),
        (["run", "kernels.py", "--family", "bogus"], "unknown family 'bogus'"),
        (["run", "--suite", "huge"], "Invalid value for '--suite'"),
    ],
)
def test_usage_and_configuration_errors_exit_2_with_one_line(project, args, message):
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert sum(line.startswith("Error:") for line in r.output.splitlines()) == 1


def test_a_family_of_no_target_kind_is_a_usage_error_that_leaves_no_folder(project):
    r = CliRunner().invoke(main, ["run", "kernels.py", "--family", "attn_gaussian", "--out", "new/out"])
    assert r.exit_code == 2
    assert "no family named attn_gaussian applies to the targets' kinds (softmax)" in r.output
    assert not (project / "new").exists()  # the folder checked for the reports is removed again


def test_config_is_read_and_the_command_line_wins(project):
    (project / "pyproject.toml").write_text(
        textwrap.dedent("""
        [tool.softaudit]
        targets = ["kernels.py"]
        dtypes = ["float32"]
        suite = "quick"
        out = "from-config"
        formats = ["json"]
    """)
    )
    r = invoke("run")
    assert r.exit_code == 0, r.output
    data = json.loads((project / "from-config" / "results.json").read_text())
    assert data["settings"]["dtypes"] == ["float32"]
    r = invoke("run", "--dtype", "float64", "--out", "cli")
    assert json.loads((project / "cli" / "results.json").read_text())["settings"]["dtypes"] == ["float64"]


def test_an_unknown_config_key_is_a_configuration_error(project):
    (project / "pyproject.toml").write_text("[tool.softaudit]\nsuit = 'quick'\n")
    r = CliRunner().invoke(main, ["run"])
    assert r.exit_code == 2 and "unknown key 'suit'" in r.output


def test_the_gate_fails_only_on_regressions(project):
    args = ["run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out"]
    assert invoke(*args, "--update-baseline").exit_code == 0
    baseline = project / "out" / "baseline.json"
    text = baseline.read_text()
    assert json.loads(text)["rows"] and text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    assert invoke(*args, "--baseline", str(baseline)).exit_code == 0  # same code: no regression
    (project / "kernels.py").write_text(PLAIN)
    r = invoke(*args, "--baseline", str(baseline), "--format", "md")
    assert r.exit_code == 1 and "pass became warn" in r.output  # a warn alone exits 0; a new one regresses
    (project / "kernels.py").write_text(BAD)
    r = invoke(*args, "--baseline", str(baseline), "--format", "md", "--format", "junit")
    assert r.exit_code == 1
    assert "regression" in r.output
    summary = (project / "out" / "summary.md").read_text()
    assert "regression(s):" in summary and "pass became fail" in summary
    assert "regression: pass became fail" in (project / "out" / "junit.xml").read_text()


def test_a_new_failing_candidate_fails_the_gate_and_a_regression_says_its_cause_and_fix_when_quiet(project):
    args = ["run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out"]
    assert invoke(*args, "--update-baseline").exit_code == 0
    (project / "kernels.py").write_text(GOOD + BAD.replace("def kernel(", "def broken(").split("import softaudit")[1])
    r = invoke(*args, "--baseline", "out/baseline.json", "-q")
    assert r.exit_code == 1, r.output
    # the regressions of one candidate x dtype are grouped under one line naming it
    assert "regression kernels:broken | float16: " in r.output
    assert "    textbook: new row: fail (not in the baseline)" in r.output
    assert "FAIL  kernels:broken float16" in r.output and "fix: subtract the row max" in r.output
    assert "kernels:kernel" not in r.output  # the known, passing candidate is not among what to act on
    (project / "kernels.py").write_text(GOOD + PLAIN.replace("def kernel(", "def plain(").split("import softaudit")[1])
    r = invoke(*args, "--baseline", "out/baseline.json")
    assert r.exit_code == 0 and "0 regression(s)" in r.output  # a new candidate that only warns is listed, not fatal


def test_known_failures_do_not_fail_the_gate(project):
    (project / "kernels.py").write_text(BAD)
    args = ["run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out"]
    assert invoke(*args, "--update-baseline").exit_code == 0  # writing a baseline accepts what it records
    r = invoke(*args, "--baseline", "out/baseline.json", "-v")
    assert r.exit_code == 0 and "known" in r.output and "0 regression(s)" in r.output
    # ... and a CI test widget reading junit.xml is green with it: the known failures are skipped, saying why.
    from xml.etree import ElementTree as ET

    root = ET.parse(project / "out" / "junit.xml").getroot()
    assert not list(root.iter("failure")) and not list(root.iter("error"))
    known = [s.get("message") for s in root.iter("skipped") if s.get("message").startswith("known fail")]
    assert known and all("(in the baseline)" in m and "NaN" in m for m in known[:1])
    assert sum(int(s.get("failures")) for s in root.iter("testsuite")) == 0
    assert sum(int(s.get("skipped")) for s in root.iter("testsuite")) >= len(known)


def test_compare_two_results_files(project):
    invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "a", "--format", "json")
    (project / "kernels.py").write_text(BAD)
    invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "b", "--format", "json")
    r = invoke("compare", "a/results.json", "b/results.json")
    assert r.exit_code == 1 and "regression" in r.output
    assert invoke("compare", "a/results.json", "a/results.json").exit_code == 0
    assert CliRunner().invoke(main, ["compare", "a/results.json", "missing.json"]).exit_code == 2


def test_compare_reads_every_results_file_a_run_writes_infinite_errors_included(project):
    # softmax_grad in float64 on a constant g: the exact gradient is 0, the plain algorithm's is not, so its ULP
    # error is infinite; results.json writes that as "inf" (JSON has no infinity) and results.csv as inf.
    args = ["run", "softaudit.candidates.softmax_grad", "--dtype", "float64", "--family", "g_constant", "--out", "o"]
    assert invoke(*args, "--update-baseline", "--cache-dir", "off").exit_code == 0
    assert '"max_ulp": "inf"' in (project / "o" / "results.json").read_text()
    pairs = [("baseline.json", "results.json"), ("baseline.json", "results.csv"), ("results.csv", "results.json")]
    for old, new in pairs:
        r = invoke("compare", f"o/{old}", f"o/{new}")
        assert r.exit_code == 0 and "0 regression(s)" in r.output, (old, new, r.output)
    r = CliRunner().invoke(main, ["compare", "o/baseline.json", "o/junit.xml"])
    assert r.exit_code == 2 and "compare reads baselines, results.json and results.csv" in the_one_error(r)


def test_listings():
    assert "long" in invoke("cases").output
    out = invoke("candidates", "--kind", "softmax").output
    assert "softmax.naive" in out and "softmax.max_shifted " in out and "(plain, in the dtype)" in out
    assert "(best practice)" in out
    for listing in ("cases", "candidates"):  # an unknown kind is a mistake, not an empty list
        r = CliRunner().invoke(main, [listing, "--kind", "sofmax"])
        assert r.exit_code == 2 and "unknown kind 'sofmax'; known: softmax, log_softmax" in r.output
    assert invoke("run", "-h").output.startswith("Usage: ")  # -h is --help


def test_github_format_prints_annotations_and_fills_the_step_summary(project, monkeypatch):
    (project / "kernels.py").write_text(BAD)
    step = project / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    r = invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out", "--format", "github")
    assert r.exit_code == 1
    line = BAD.splitlines().index("def kernel(x, axis=-1):") + 1  # the annotation marks the definition
    assert r.output.startswith(f"::error file=kernels.py,line={line},title=softaudit fail%3A"), r.output
    assert "## Verdicts" in step.read_text()
    args = ["run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out"]
    assert invoke(*args, "--update-baseline").exit_code == 0  # writing a baseline accepts what it records
    r = invoke(*args, "--baseline", "out/baseline.json", "--format", "github", "-q")
    assert r.exit_code == 0 and "::notice" not in r.output  # quiet: the known findings are not announced
    (project / "kernels.py").write_text(BAD.replace("e = np.exp(w)", "e = np.exp(w) * 0"))  # NaN everywhere now
    r = invoke(*args, "--baseline", "out/baseline.json", "--format", "github", "-q")
    regression = next(line for line in r.output.splitlines() if "title=softaudit regression" in line)
    assert regression.startswith(f"::error file=kernels.py,line={line},")
    assert "became" in regression and "NaN" in regression  # with the row's note
    # ... and each regression once: every line of the quiet output is an annotation
    assert r.output.strip() and all(line.startswith("::error") for line in r.output.splitlines()), r.output


# --- Every setting and file is checked before the audit: a mistake costs seconds, not an audit, and is one line. ---

SPY = GOOD.replace(
    "    w = x.astype(np.float64)",
    "    open('called', 'a').close()  # the audit reached the candidate\n    w = x.astype(np.float64)",
)
QUICK = ["--suite", "quick", "--dtype", "float16", "--family", "textbook"]


def npy_bytes(array, allow_pickle=False) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=allow_pickle)
    return buffer.getvalue()


@pytest.fixture
def spy(project):
    """A project whose candidate leaves the file `called` when the audit calls it."""
    (project / "spy.py").write_text(SPY)
    return project


def the_one_error(r) -> str:
    """The single `Error:` line of a usage or configuration error (exit 2, no traceback)."""
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    errors = [line for line in r.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, r.output
    return errors[0]


def row(**fields) -> dict:
    return {"verdict": "pass", "max_ulp": 0.5, "nan": 0, "overflow": 0, "underflow": 0, "mask_leak": 0} | fields


def baseline_text(entry) -> str:
    return json.dumps({"format": 1, "rows": {"spy:kernel | float16 | textbook": entry}})


@pytest.mark.parametrize(
    "files, args, error",
    [
        ({}, ["--timeout", "-1"], "Error: Invalid value for '--timeout': must be a number > 0, got -1"),
        ({}, ["--timeout", "0"], "Error: Invalid value for '--timeout': must be a number > 0, got 0"),
        ({}, ["--timeout", "nan"], "Error: Invalid value for '--timeout': must be a number > 0, got nan"),
        ({}, ["--tolerance", "-0.5"], "Error: Invalid value for '--tolerance': must be a number >= 0, got -0.5"),
        ({}, ["--factor", "0"], "Error: Invalid value for '--factor': must be a number > 0, got 0"),
        ({}, ["--min-ulp", "-1"], "Error: Invalid value for '--min-ulp': must be a number >= 0, got -1"),
        ({}, ["--seed", "1.5"], "Error: Invalid value for '--seed': '1.5' is not a valid integer."),
        ({"out.txt": "x"}, ["--out", "out.txt"], "Error: --out out.txt is a file, not a folder"),
        ({"afile": "x"}, ["--out", "afile/reports"], "Error: --out afile/reports cannot be written: Not a directory"),
        ({}, ["--baseline", "nope.json"], "Error: no such baseline: nope.json (write one with --update-baseline)"),
        ({"b.json": '{"rows": []}'}, ["--baseline", "b.json"], "Error: b.json is not a softaudit baseline (no 'rows')"),
        (
            {"b.json": baseline_text(row(max_ulp="big"))},
            ["--baseline", "b.json"],
            "Error: b.json: row 'spy:kernel | float16 | textbook' has 'max_ulp' 'big', not a number or null",
        ),
        (
            {"b.json": baseline_text({"max_ulp": 1.0})},
            ["--baseline", "b.json"],
            "Error: b.json: row 'spy:kernel | float16 | textbook' has no 'verdict'",
        ),
        (
            {"bdir/keep": ""},
            ["--update-baseline", "--baseline", "bdir"],
            "Error: --update-baseline cannot write bdir: it is a folder",
        ),
        (
            {"afile": ""},
            ["--update-baseline", "--baseline", "afile/b.json"],
            "Error: --update-baseline afile/b.json: its folder afile is a file, not a folder",
        ),
        (
            {"x.npy": "hello world\n"},
            ["--cases", "x.npy"],
            "Error: x.npy is not a .npy or .npz file (it starts with 'hello world\\n')",
        ),
        (
            {"x.npy": npy_bytes(np.array([{"a": 1}], dtype=object), allow_pickle=True)},
            ["--cases", "x.npy"],
            "Error: x.npy holds Python objects, not numbers",
        ),
        (
            {"x.npy": npy_bytes(np.zeros((2, 2, 2)))},
            ["--cases", "x.npy"],
            "Error: x.npy: expected rows x n, got shape (2, 2, 2)",
        ),
        (
            {"corpus.json": "{}"},
            ["--corpus", "corpus.json"],
            "Error: --corpus corpus.json is a file, not a folder of hunt findings",
        ),
    ],
)
def test_run_says_a_mistake_in_one_line_before_the_audit(spy, files, args, error):
    for name, content in files.items():
        (spy / name).parent.mkdir(parents=True, exist_ok=True)
        (spy / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    r = CliRunner().invoke(main, ["run", "spy.py", *QUICK, "--out", "out", *args])
    assert the_one_error(r) == error
    assert not (spy / "called").exists(), "the candidate ran: the mistake was found after the audit"


def test_a_case_file_is_checked_for_the_kinds_of_the_targets_before_the_audit(spy):
    np.savez(spy / "attn.npz", q=np.ones((2, 4)), k=np.ones((3, 4)), v=np.ones((3, 2)))
    r = CliRunner().invoke(main, ["run", "spy.py", *QUICK, "--cases", "attn.npz"])
    assert the_one_error(r) == "Error: attn.npz: a case file for softmax needs x; it has k, q, v"
    assert not (spy / "called").exists()


@pytest.mark.parametrize(
    "line, error",
    [
        ("timeout = -1", "timeout must be a number > 0, got -1"),
        ("timeout = nan", "timeout must be a number > 0, got nan"),
        ("tolerance = -0.5", "tolerance must be a number >= 0, got -0.5"),
        ("factor = 0", "factor must be a number > 0, got 0"),
        ("min_ulp = -1.0", "min_ulp must be a number >= 0, got -1.0"),
        ("budget = 0", "budget must be a number > 0, got 0"),
        ("seed = 1.5", "seed must be an integer, got 1.5"),
        ("seed = true", "seed must be an integer, got True"),
        ("timeout = 'long'", "timeout must be a number > 0, got 'long'"),
        ("cases = [1]", "cases must be a list of strings, got [1]"),
    ],
)
def test_a_bad_config_value_names_the_key_and_the_file(spy, line, error):
    (spy / "pyproject.toml").write_text(f"[tool.softaudit]\ntargets = ['spy.py']\n{line}\n")
    for command in (["run", *QUICK], ["hunt", "--budget", "1"]):
        r = CliRunner().invoke(main, command)
        assert the_one_error(r) == f"Error: {spy / 'pyproject.toml'}: [tool.softaudit] {error}"
    assert not (spy / "called").exists()


@pytest.mark.parametrize(
    "files, args, error",
    [
        ({}, ["--budget", "0"], "Error: Invalid value for '--budget': must be a number > 0, got 0"),
        ({}, ["--timeout", "-1"], "Error: Invalid value for '--timeout': must be a number > 0, got -1"),
        ({"out.txt": "x"}, ["--out", "out.txt"], "Error: --out out.txt is a file, not a folder"),
        ({"corpus.json": "{}"}, ["--corpus", "corpus.json"], "Error: --corpus corpus.json is a file, not a folder"),
    ],
)
def test_hunt_says_a_mistake_in_one_line_before_the_search(spy, files, args, error):
    for name, content in files.items():
        (spy / name).write_text(content)
    r = CliRunner().invoke(main, ["hunt", "spy.py", "--budget", "1", *args])
    assert the_one_error(r) == error
    assert not (spy / "called").exists()


@pytest.mark.parametrize(
    "entry, problem",
    [
        ([1], "is [1], not an object"),
        ({"max_ulp": 1.0}, "has no 'verdict'"),
        ({"verdict": "pass"}, "has no 'max_ulp'"),
        (row(verdict=1), "has 'verdict' 1, not one of pass, skip, warn, fail, error"),
        (row(max_ulp=True), "has 'max_ulp' True, not a number or null"),
        (row(nan=1.5), "has 'nan' 1.5, not a count (an integer >= 0)"),
        (row(overflow=-1), "has 'overflow' -1, not a count (an integer >= 0)"),
    ],
)
def test_compare_names_the_malformed_row_and_field(project, entry, problem):
    (project / "b.json").write_text(baseline_text(entry))
    r = CliRunner().invoke(main, ["compare", "b.json", "b.json"])
    assert the_one_error(r) == f"Error: b.json: row 'spy:kernel | float16 | textbook' {problem}"


def test_compare_reads_good_rows_and_checks_results_files(project):
    (project / "b.json").write_text(baseline_text(row(max_ulp=None, mask_leak=0)))
    assert invoke("compare", "b.json", "b.json").exit_code == 0
    (project / "r.json").write_text(json.dumps({"results": [{"candidate": "c", "dtype": "float16", "family": "f"}]}))
    assert (
        the_one_error(CliRunner().invoke(main, ["compare", "r.json", "b.json"]))
        == "Error: r.json: result 0 has no 'verdict'"
    )
    bad = {"candidate": "c", "dtype": "float16", "family": "f", "verdict": "pass", "max_ulp": "x"}
    (project / "r.json").write_text(json.dumps({"results": [bad]}))
    assert (
        the_one_error(CliRunner().invoke(main, ["compare", "r.json", "b.json"]))
        == "Error: r.json: result 0 (c | float16 | f) has 'max_ulp' 'x', not a number or null"
    )
    r = CliRunner().invoke(main, ["compare", "b.json", "b.json", "--tolerance", "-1"])
    assert the_one_error(r) == "Error: Invalid value for '--tolerance': must be a number >= 0, got -1"


# --- Results computed are never lost to a folder problem found after the audit. ---


def sabotage(code: str) -> str:
    """The good kernel, running `code` (a line) on its first call: the folder changes under a running audit."""
    return GOOD.replace(
        "    w = x.astype(np.float64)",
        f"    import os, shutil\n    if not os.path.exists('sabotaged'):\n        open('sabotaged', 'w').close()\n"
        f"        {code}\n    w = x.astype(np.float64)",
    )


@pytest.fixture
def temporary(tmp_path, monkeypatch):
    """tempfile's folder, moved inside the test's own."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_when_nothing_can_be_written_to_out_the_reports_go_to_a_temporary_folder(project, temporary):
    (project / "kernels.py").write_text(sabotage("shutil.rmtree('out'); open('out', 'w').close()"))
    r = CliRunner().invoke(main, ["run", "kernels.py", *QUICK, "--out", "out"])
    (rescue,) = temporary.glob("softaudit-*")
    assert the_one_error(r) == f"Error: could not write the reports to out; written to {rescue} instead"
    assert "Warning: cannot write the reports in out: Not a directory" in r.output.splitlines()
    for name in ("results.csv", "worst.csv", "results.json", "summary.md", "junit.xml", "report.html"):
        assert (rescue / name).is_file(), name
    assert json.loads((rescue / "results.json").read_text())["results"]


def test_a_report_that_cannot_be_written_costs_only_itself_and_goes_to_a_temporary_folder(project, temporary):
    (project / "kernels.py").write_text(sabotage("os.makedirs('out/report.html/inside')"))
    r = CliRunner().invoke(main, ["run", "kernels.py", *QUICK, "--out", "out"])
    assert r.exit_code == 0, r.output  # the verdict's exit code: the rest of the set is where it was asked
    assert "Warning: cannot write the html report in out: Is a directory" in r.output.splitlines()
    assert not any(line.startswith("Error:") for line in r.output.splitlines())
    for name in ("results.csv", "results.json", "summary.md", "junit.xml"):
        assert (project / "out" / name).is_file(), name
    (rescue,) = temporary.glob("softaudit-*")
    assert f"Warning: could not write the html report to out; written to {rescue} instead" in r.output.splitlines()
    assert (rescue / "report.html").is_file() and not (rescue / "results.csv").exists()


def test_a_baseline_that_cannot_be_written_goes_to_a_temporary_folder(project, temporary):
    (project / "kernels.py").write_text(sabotage("os.makedirs('b.json')"))
    r = CliRunner().invoke(
        main, ["run", "kernels.py", *QUICK, "--out", "out", "--update-baseline", "--baseline", "b.json"]
    )
    (rescue,) = temporary.glob("softaudit-*")
    assert the_one_error(r) == f"Error: could not write the baseline to b.json; written to {rescue} instead"
    assert json.loads((rescue / "baseline.json").read_text())["rows"]
    assert (project / "out" / "results.json").is_file()


def test_hunt_tables_go_to_a_temporary_folder_when_out_is_gone(project, temporary):
    (project / "kernels.py").write_text(sabotage("shutil.rmtree('out'); open('out', 'w').close()"))
    r = CliRunner().invoke(main, ["hunt", "kernels.py", "--budget", "1", "--out", "out", "--corpus", "corpus"])
    (rescue,) = temporary.glob("softaudit-*")
    assert the_one_error(r) == f"Error: could not write the hunt's tables to out; written to {rescue} instead"
    assert (rescue / "hunt.csv").is_file() and (rescue / "hunt.md").is_file()


def test_the_spy_sees_an_audit(spy):
    """The control for the tests above: an audit that runs does call the candidate."""
    assert invoke("run", "spy.py", *QUICK, "--out", "out").exit_code == 0
    assert (spy / "called").exists()


# --- A kind that is unknown or absent, and a device that is unknown or absent, are usage errors, before the audit. ---

KNOWN_KINDS = (
    "softmax, log_softmax, logsumexp, masked_softmax, attention, attention_lse, cross_entropy, linear_cross_entropy, "
    "merge_attention, attention_fp8, quantize_fp8, softmax_grad, log_softmax_grad, logsumexp_grad, "
    "masked_softmax_grad, attention_grad, attention_sinks_grad, cross_entropy_grad, linear_cross_entropy_grad"
)


@pytest.mark.parametrize("command", [["run", *QUICK], ["hunt", "--budget", "1"]])
@pytest.mark.parametrize(
    "args, config, error",
    [
        (["--kind", "attention"], "", "Error: spy.py has no attention candidate; its kinds: softmax"),
        (
            ["--kind", "sofmax"],
            "",
            f"Error: unknown kind 'sofmax'; known: {KNOWN_KINDS}",
        ),
        (
            [],
            "kind = 'sofmax'",
            f"Error: unknown kind 'sofmax'; known: {KNOWN_KINDS}",
        ),
        (["--device", "tpu"], "", "Error: unknown device 'tpu'; known: cpu, cuda, cuda:N, gpu"),
        ([], "device = 'cuda:x'", "Error: unknown device 'cuda:x'; known: cpu, cuda, cuda:N, gpu"),
    ],
)
def test_an_unknown_or_absent_kind_or_device_is_one_line_before_the_audit(spy, command, args, config, error):
    (spy / "pyproject.toml").write_text(f"[tool.softaudit]\ntargets = ['spy.py']\n{config}\n")
    r = CliRunner().invoke(main, [*command, "--out", "out", *args])
    assert the_one_error(r) == error
    assert not (spy / "called").exists()


@pytest.mark.parametrize("command", [["run", *QUICK], ["hunt", "--budget", "1"]])
def test_kind_given_twice_is_one_line_before_the_audit(spy, command):
    """click keeps the last of a repeated single-value option: the first kind would be dropped without a word."""
    (spy / "pyproject.toml").write_text("[tool.softaudit]\ntargets = ['spy.py']\n")
    r = CliRunner().invoke(main, [*command, "--out", "out", "--kind", "softmax", "--kind", "softmax_grad"])
    assert r.exit_code == 2
    assert "takes one kind, got softmax, softmax_grad: run once per kind" in r.output
    assert not (spy / "called").exists()


@pytest.mark.parametrize("command", [["run", *QUICK], ["hunt", "--budget", "1"]])
@pytest.mark.parametrize("args, config", [(["--device", "cuda"], ""), ([], "device = 'cuda'")])
def test_an_absent_gpu_is_one_line_before_the_audit(project, command, args, config):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    (project / "pyproject.toml").write_text(f"[tool.softaudit]\n{config}\n")
    r = CliRunner().invoke(main, [*command, "softaudit.frameworks.torch:softmax", "--out", "out", *args])
    assert the_one_error(r) == "Error: device 'cuda' is not available: torch sees no CUDA GPU"
    assert not (project / "out" / "results.csv").exists()


def test_device_cpu_gives_the_same_table_as_no_device(project):
    pytest.importorskip("torch")
    for folder, args in (("plain", []), ("cpu", ["--device", "cpu"])):
        # (the forward kinds: a full audit of attention_grad needs its exact reference, written separately)
        r = invoke(
            "run",
            "softaudit.frameworks.torch",
            *QUICK,
            "--family",
            "attn_masks",
            "--kind",
            "attention",
            "--out",
            folder,
            "--format",
            "csv",
            *args,
        )
        assert r.exit_code == 0, r.output
    import pandas as pd

    plain, on_cpu = (
        pd.read_csv(project / folder / "results.csv").drop(columns="seconds") for folder in ("plain", "cpu")
    )
    assert len(plain) == 12 and plain.equals(on_cpu)  # (8 SDPA forms, 2 FlexAttention forms, sdpa_bias, sdpa_sinks)


# --- Local code imports as the user's own scripts would; `python -m softaudit` is the command line. ---


def test_a_file_imports_its_sibling_and_a_module_needs_no_pythonpath(project):
    (project / "helper.py").write_text(GOOD)
    (project / "uses_helper.py").write_text("from helper import kernel\n")
    (project / "localpkg").mkdir()
    (project / "localpkg" / "__init__.py").write_text("")
    (project / "localpkg" / "ops.py").write_text(GOOD)
    try:
        r = invoke("run", "uses_helper.py:kernel", *QUICK, "--out", "a", "--format", "csv")
        assert r.exit_code == 0 and "1 pass" in r.output, r.output
        r = invoke("run", "localpkg.ops:kernel", *QUICK, "--out", "b", "--format", "csv")
        assert r.exit_code == 0 and "1 pass" in r.output, r.output
    finally:
        for name in ("helper", "localpkg", "localpkg.ops"):
            sys.modules.pop(name, None)


USES_HELPER = """
import softaudit
from helper import kernel as _k  # a sibling module; its candidate is helper's, not this file's


@softaudit.candidate(kind="softmax", name="mine")
def mine(x, axis=-1):
    return _k(x, axis)
"""


def test_python_m_softaudit_runs_the_command_line(project):
    (project / "helper.py").write_text(GOOD)
    (project / "uses_helper.py").write_text(USES_HELPER)
    done = subprocess.run(
        [sys.executable, "-m", "softaudit", "run", "uses_helper.py", *QUICK, "--out", "out", "--format", "csv"],
        capture_output=True,
        text=True,
        cwd=project,
    )
    assert done.returncode == 0, done.stderr
    assert "1 pass, 0 warn, 0 fail, 0 error" in done.stdout and (project / "out" / "results.csv").is_file()
    usage = subprocess.run(
        [sys.executable, "-m", "softaudit", "run", "uses_helper.py", "--kind", "attention"],
        capture_output=True,
        text=True,
        cwd=project,
    )
    assert (
        usage.returncode == 2
        and usage.stderr.strip() == "Error: uses_helper.py has no attention candidate; its kinds: softmax"
    )
