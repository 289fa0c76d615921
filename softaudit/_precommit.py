"""The pre-commit hook (.pre-commit-hooks.yaml): a quick-suite audit of the Python files a commit changes that mark
candidates.

pre-commit calls the hook's entry with the hook's `args` first, then the changed files' names. The files that mark no
candidate (most of a commit) are left out, since `softaudit run` on a file with nothing to audit is a usage error; a
commit that changes none of those passes at once. The rest is `softaudit run --suite quick -q` on those files, with
the project's [tool.softaudit] (its baseline, so known failures do not block a commit) and the hook's args; the
reports go to a temporary folder unless the args name `--out`, so a commit leaves no files behind.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

#: A file marks candidates where it calls softaudit's marker: `@softaudit.candidate(...)`, `candidate(f, kind=...)`
#: after `from softaudit import candidate`, or a framework factory's products (which import softaudit).
_MARKS = re.compile(r"\bcandidate\s*\(|softaudit\.frameworks")


def marks_candidates(path: Path) -> bool:
    """Whether the file may mark a candidate: it mentions softaudit and calls a marker (a cheap text test; the audit
    itself then loads it)."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "softaudit" in text and bool(_MARKS.search(text))


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(options, files): the arguments that name an existing .py file are files; the others are the hook's args."""
    files = [a for a in argv if a.endswith(".py") and Path(a).is_file()]
    return [a for a in argv if a not in files], files


def main(argv: list[str] | None = None) -> int:
    options, files = split(sys.argv[1:] if argv is None else argv)
    targets = [f for f in files if marks_candidates(Path(f))]
    if not targets:
        return 0
    from .cli import main as cli

    with tempfile.TemporaryDirectory(prefix="softaudit-pre-commit-") as out:
        given = [] if any(o == "--out" or o.startswith("--out=") for o in options) else ["--out", out]
        try:
            cli(["run", "--suite", "quick", "-q", *given, *options, *targets], prog_name="softaudit")
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
