"""The code's style: ruff's linter and formatter find nothing in softaudit, tests and benchmarks.

The rules and the line length are pyproject.toml's [tool.ruff]; docs/design.md says how to run both commands. The
test extra installs ruff; without it this module skips.
"""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ruff")

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("softaudit", "tests", "benchmarks")


@pytest.mark.parametrize(
    "command",
    [("check",), ("format", "--diff")],  # format --diff: --check's verdict, with the change it wants shown
    ids=["check", "format"],
)
def test_ruff_finds_nothing(command):
    run = subprocess.run(
        [sys.executable, "-m", "ruff", *command, *FOLDERS], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    if run.returncode:  # ruff's own report, without pytest's repr of the process around it
        pytest.fail(f"ruff {' '.join(command)} {' '.join(FOLDERS)}:\n{run.stdout}{run.stderr}", pytrace=False)
