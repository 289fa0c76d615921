"""The GitHub Action (action.yml) and the pre-commit hook (.pre-commit-hooks.yaml), run as their hosts run them: the
action's shell steps with its inputs substituted, in a temporary folder (the `uses:` steps are GitHub's own: they
are checked to name real actions at pinned versions); the hook by its entry point and, where pre-commit is
installed, by `pre-commit try-repo`."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from softaudit import _precommit

ROOT = Path(__file__).resolve().parents[1]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text())

#: The actions the composite action may use, each pinned to a major version (what GitHub resolves).
KNOWN = {"actions/setup-python", "actions/upload-artifact"}

BROKEN = """\
import numpy as np
import softaudit


@softaudit.candidate(kind="softmax")
def uniform(x, axis=-1):
    return np.full_like(x, 1.0 / x.shape[axis])
"""

SOUND = """\
import numpy as np
import softaudit


@softaudit.candidate(kind="softmax")
def shifted(x, axis=-1):
    e = np.exp(x.astype(np.float64) - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)
"""


def test_the_action_is_composite_and_its_uses_are_real_pinned_actions():
    assert ACTION["runs"]["using"] == "composite"
    uses = [step["uses"] for step in ACTION["runs"]["steps"] if "uses" in step]
    assert uses, "the action sets up Python and uploads the reports with GitHub's actions"
    for use in uses:
        name, _, version = use.partition("@")
        assert name in KNOWN, f"{use}: not an action this test knows to be real"
        assert re.fullmatch(r"v\d+(\.\d+)*", version), f"{use}: not pinned to a version"
    assert {u.partition("@")[0] for u in uses} == KNOWN


def substitute(text: str, inputs: dict) -> str:
    """GitHub's expression substitution, for the expressions the action uses: its inputs."""

    def value(match):
        name = match[1].strip()
        assert name.startswith("inputs."), f"an expression the test does not know: {name}"
        return str(inputs[name.removeprefix("inputs.")])

    return re.sub(r"\$\{\{(.*?)\}\}", value, text)


def shims(folder: Path, pip_log: Path) -> Path:
    """A `python` that records `python -m pip ...` (installing into the test's own environment is not this test's
    business) and runs everything else, and a `softaudit` that is this checkout's command line."""
    folder.mkdir()
    python = folder / "python"
    python.write_text(
        textwrap.dedent(f"""\
        #!/bin/sh
        if [ "$1" = "-m" ] && [ "$2" = "pip" ]; then printf '%s\\n' "$@" > {pip_log}; exit 0; fi
        exec {sys.executable} "$@"
        """)
    )
    command = folder / "softaudit"
    command.write_text(f'#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m softaudit "$@"\n')
    for f in (python, command):
        f.chmod(0o755)
    return folder


def run_action(tmp_path: Path, **given) -> tuple[list[subprocess.CompletedProcess], dict, Path]:
    """The action's run: steps in order with these inputs (the others at their defaults), as a composite action
    runs them: each step stops the job when it fails, unless it says `if: always()`."""
    inputs = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()} | given
    work = tmp_path / "repo"
    work.mkdir(exist_ok=True)
    pip_log, output, summary = tmp_path / "pip.txt", tmp_path / "output.txt", tmp_path / "summary.md"
    path = shims(tmp_path / "bin", pip_log)
    base = {
        "PATH": f"{path}{os.pathsep}{os.environ['PATH']}",
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_OUTPUT": str(output),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_ACTIONS": "true",
    }
    done, failed = [], False
    for step in ACTION["runs"]["steps"]:
        if "uses" in step:
            continue
        assert step["shell"] == "bash"
        if failed and "always()" not in str(step.get("if", "")):
            continue
        env = os.environ | base | {k: substitute(str(v), inputs) for k, v in step.get("env", {}).items()}
        cwd = work / substitute(step.get("working-directory", "."), inputs)
        result = subprocess.run(
            ["bash", "-e", "-c", substitute(step["run"], inputs)], cwd=cwd, env=env, capture_output=True, text=True
        )
        done.append(result)
        failed = failed or result.returncode != 0
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines()) if output.exists() else {}
    return done, outputs | {"pip": pip_log.read_text().split() if pip_log.exists() else None}, summary


def test_the_action_installs_itself_with_its_extras_and_audits_the_targets(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "kernels.py").write_text(BROKEN)
    steps, outputs, summary = run_action(
        tmp_path, targets="kernels.py", args="--dtype float32 --family textbook", extras="torch", out="audit-out"
    )
    install, audit = steps
    assert install.returncode == 0, install.stderr
    assert outputs["pip"] == ["-m", "pip", "install", "--quiet", f"{ROOT}[torch]"]
    assert audit.returncode == 1, audit.stdout + audit.stderr  # (the step fails: a row failed)
    assert outputs["exit-code"] == "1"
    assert "::error" in audit.stdout and "kernels:uniform" in audit.stdout  # (the annotations)
    assert "kernels:uniform" in summary.read_text()  # (summary.md on the run's page)
    # the upload step's path holds the reports
    upload = next(step for step in ACTION["runs"]["steps"] if step.get("uses", "").startswith("actions/upload"))
    inputs = {name: spec.get("default", "") for name, spec in ACTION["inputs"].items()} | {"out": "audit-out"}
    reports = tmp_path / "repo" / substitute(upload["with"]["path"], inputs)
    assert {"results.json", "report.html", "summary.md", "junit.xml", "results.csv"} <= {
        p.name for p in reports.iterdir()
    }
    assert json.loads((reports / "results.json").read_text())["settings"]["dtypes"] == ["float32"]
    assert upload["if"] == "always()"  # (the reports are uploaded when the audit failed too)


def test_the_action_passes_on_a_sound_kernel_without_extras(tmp_path):
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "kernels.py").write_text(SOUND)
    steps, outputs, summary = run_action(tmp_path, targets="kernels.py", args="--dtype float32 --family textbook")
    assert [s.returncode for s in steps] == [0, 0], steps[-1].stdout + steps[-1].stderr
    assert outputs["exit-code"] == "0" and outputs["pip"] == ["-m", "pip", "install", "--quiet", str(ROOT)]
    assert "kernels:shifted" in summary.read_text()


# ---- the pre-commit hook


HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def test_the_hook_runs_the_entry_point_pyproject_installs():
    import tomllib

    (hook,) = HOOKS
    assert hook["language"] == "python" and hook["types"] == ["python"]
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts[hook["entry"]] == "softaudit._precommit:main"


def test_the_hook_audits_only_files_that_mark_candidates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("plain.py").write_text("def f(x):\n    return x\n")
    Path("kernels.py").write_text(BROKEN)
    Path("made.py").write_text("from softaudit.frameworks.torch import sdpa\n\nflash = sdpa('bool', 'flash')\n")
    assert not _precommit.marks_candidates(Path("plain.py"))
    assert _precommit.marks_candidates(Path("kernels.py")) and _precommit.marks_candidates(Path("made.py"))
    assert _precommit.split(["--dtype", "float32", "plain.py", "kernels.py"]) == (
        ["--dtype", "float32"],
        ["plain.py", "kernels.py"],
    )
    assert _precommit.main(["plain.py"]) == 0  # (nothing to audit: a commit of other files passes)
    assert _precommit.main(["--dtype", "float32", "--family", "textbook", "plain.py", "kernels.py"]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernels.py", "made.py", "plain.py"]  # (no reports left)


def test_the_hook_passes_a_sound_kernel(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("kernels.py").write_text(SOUND)
    assert _precommit.main(["--dtype", "float32", "--family", "textbook", "kernels.py"]) == 0


@pytest.mark.skipif(shutil.which("pre-commit") is None, reason="pre-commit is not installed")
def test_pre_commit_runs_the_hook_from_this_repository(tmp_path):
    """pre-commit itself: it installs softaudit from this checkout into its own environment and runs the hook on
    the files given, as it would on a commit."""
    repo = tmp_path / "user"
    repo.mkdir()
    (repo / "kernels.py").write_text(BROKEN)
    (repo / "notes.py").write_text("x = 1\n")
    git = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    env = os.environ | git  # (pre-commit keeps the hook's environment in its own cache, as for any hook)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    args = ["pre-commit", "try-repo", str(ROOT), "softaudit", "--verbose", "--files"]
    failing = subprocess.run([*args, "kernels.py", "notes.py"], cwd=repo, env=env, capture_output=True, text=True)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "kernels:uniform" in failing.stdout
    passing = subprocess.run([*args, "notes.py"], cwd=repo, env=env, capture_output=True, text=True)
    assert passing.returncode == 0, passing.stdout + passing.stderr
