"""The code's style: ruff's linter and formatter find nothing in softaudit, tests and benchmarks; a module over 400
lines says in its docstring why it is one module.

The rules and the line length are pyproject.toml's [tool.ruff]; docs/design.md says how to run both commands. The
test extra installs ruff; without it the ruff tests skip. (No date in softaudit's source, pyproject.toml or the
README, the sign of a measurement that belongs in docs/benchmarks.md: tests/test_docs.py checks it.)
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("softaudit", "tests", "benchmarks")
#: The house's limit on a module's length, and the words that open the paragraph of its docstring saying why a
#: longer one is one module all the same ("(Longer than the house's 400 lines: what holds it together.)").
LIMIT = 400
REASON = "(Longer than the house's 400 lines: "


def _modules():
    return sorted((ROOT / "softaudit").rglob("*.py"))


@pytest.mark.parametrize(
    "command",
    [("check",), ("format", "--diff")],  # format --diff: --check's verdict, with the change it wants shown
    ids=["check", "format"],
)
def test_ruff_finds_nothing(command):
    pytest.importorskip("ruff")
    run = subprocess.run(
        [sys.executable, "-m", "ruff", *command, *FOLDERS], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    if run.returncode:  # ruff's own report, without pytest's repr of the process around it
        pytest.fail(f"ruff {' '.join(command)} {' '.join(FOLDERS)}:\n{run.stdout}{run.stderr}", pytrace=False)


def unexplained(path: Path) -> bool:
    """Whether the module is over LIMIT lines and its docstring has no paragraph opening with REASON and saying
    something after it."""
    text = path.read_text(encoding="utf-8")
    if len(text.splitlines()) <= LIMIT:
        return False
    doc = ast.get_docstring(ast.parse(text), clean=False) or ""
    at = doc.find(REASON)
    return at < 0 or not doc[at + len(REASON) :].strip(" \n).")


def test_a_module_over_400_lines_says_why_it_is_one_module():
    long = [p.relative_to(ROOT).as_posix() for p in _modules() if unexplained(p)]
    assert not long, (
        f"over {LIMIT} lines without a reason in the docstring (a paragraph opening {REASON!r}), or split: {long}"
    )


def test_the_length_check_can_fail(tmp_path):
    body = "x = 1\n" * LIMIT
    bare = tmp_path / "bare.py"
    bare.write_text('"""A module."""\n' + body)
    said = tmp_path / "said.py"
    said.write_text(f'"""A module.\n\n{REASON}its parts share one table.)\n"""\n' + body)
    empty = tmp_path / "empty.py"
    empty.write_text(f'"""A module.\n\n{REASON})\n"""\n' + body)
    short = tmp_path / "short.py"
    short.write_text('"""A module."""\n' + "x = 1\n" * (LIMIT - 1))
    assert [unexplained(p) for p in (bare, said, empty, short)] == [True, False, True, False]
