"""The command line: exit codes, one-line errors, configuration, the baseline gate, compare."""

import json
import textwrap

import pytest
from click.testing import CliRunner

from softaudit.cli import main

GOOD = '''
import numpy as np
import softaudit

@softaudit.candidate(kind="softmax")
def kernel(x, axis=-1):
    w = x.astype(np.float64)
    with np.errstate(all="ignore"):
        e = np.exp(w - w.max(axis=axis, keepdims=True))
        return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)
'''
BAD = GOOD.replace("w = x.astype(np.float64)", "w = x")  # computes in the dtype: worse in float16


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
    assert "pass, 0 fail, 0 error" in r.output


def test_a_failing_verdict_exits_1(project):
    (project / "kernels.py").write_text(BAD)
    r = invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out", "--format", "md")
    assert r.exit_code == 1
    assert "**FAIL**" in (project / "out" / "summary.md").read_text()


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


def test_config_is_read_and_the_command_line_wins(project):
    (project / "pyproject.toml").write_text(textwrap.dedent('''
        [tool.softaudit]
        targets = ["kernels.py"]
        dtypes = ["float32"]
        suite = "quick"
        out = "from-config"
        formats = ["json"]
    '''))
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
    (project / "kernels.py").write_text(BAD)
    r = invoke(*args, "--baseline", str(baseline), "--format", "md", "--format", "junit")
    assert r.exit_code == 1
    assert "regression" in r.output
    summary = (project / "out" / "summary.md").read_text()
    assert "regression(s):" in summary and "pass became fail" in summary
    assert "regression: pass became fail" in (project / "out" / "junit.xml").read_text()


def test_known_failures_do_not_fail_the_gate(project):
    (project / "kernels.py").write_text(BAD)
    args = ["run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out"]
    assert invoke(*args, "--update-baseline").exit_code == 0
    r = invoke(*args, "--baseline", "out/baseline.json")
    assert r.exit_code == 0 and "known failure" in r.output


def test_compare_two_results_files(project):
    invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "a", "--format", "json")
    (project / "kernels.py").write_text(BAD)
    invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "b", "--format", "json")
    r = invoke("compare", "a/results.json", "b/results.json")
    assert r.exit_code == 1 and "regression" in r.output
    assert invoke("compare", "a/results.json", "a/results.json").exit_code == 0
    assert CliRunner().invoke(main, ["compare", "a/results.json", "missing.json"]).exit_code == 2


def test_listings():
    assert "long" in invoke("cases").output
    out = invoke("candidates", "--kind", "softmax").output
    assert "softmax.naive" in out and "(comparison)" in out


def test_github_format_prints_annotations_and_fills_the_step_summary(project, monkeypatch):
    (project / "kernels.py").write_text(BAD)
    step = project / "step.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    r = invoke("run", "kernels.py", "--suite", "quick", "--dtype", "float16", "--out", "out", "--format", "github")
    assert r.exit_code == 1
    assert r.output.startswith("::error title=softaudit fail%3A") and "## Verdicts" in step.read_text()
