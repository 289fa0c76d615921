"""The README and the docs pages as a user reads them: the results table's columns are exactly the ones
docs/metrics.md defines, docs/cli.md lists every option and config key, every relative link lands on a file, every
Python example runs, every `softaudit` command shown parses, and the README's first audit prints what it shows."""

import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import softaudit
from softaudit.results import COLUMNS

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "metrics.md"
README = ROOT / "README.md"
CLI_DOC = ROOT / "docs" / "cli.md"
PAGES = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


def documented_columns() -> list[str]:
    names, in_table = [], False
    for line in DOC.read_text().splitlines():
        if line.startswith("| column | definition |"):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            names += re.findall(r"`([a-z_0-9]+)`", line.split("|")[1])
    return names


def test_every_column_is_documented_once_and_nothing_else_is():
    documented = documented_columns()
    assert len(documented) == len(set(documented)), "a column is defined twice"
    table = softaudit.audit(
        "softaudit.candidates.softmax:max_shifted", dtypes=["float16"], suite="quick", families=["textbook"]
    ).table
    assert list(table.columns) == list(COLUMNS)
    assert sorted(documented) == sorted(COLUMNS)


def test_the_cli_reference_lists_every_config_key_and_every_option_of_run_and_hunt():
    import click

    from softaudit.cli import main
    from softaudit.settings import SETTINGS

    text = CLI_DOC.read_text()
    keys = re.search(r"^Keys: (.*?)\(and budget, for `hunt`\)\.$", text, re.S | re.M)[1]
    listed = sorted(k.strip() for k in keys.replace("\n", " ").split(",") if k.strip())
    assert listed == sorted(set(SETTINGS) - {"budget"})
    for command in ("run", "hunt"):
        for param in main.commands[command].params:
            if isinstance(param, click.Option):
                assert any(f"`{opt}" in text for opt in param.opts), f"{command} {param.opts[0]} is not in docs/cli.md"


def test_the_config_example_uses_only_real_keys():
    from softaudit.settings import SETTINGS

    (block,) = blocks(CLI_DOC, "toml")
    assert set(tomllib.loads(block)["tool"]["softaudit"]) <= set(SETTINGS)


# ---- the front door


def test_the_readme_is_short_and_keeps_the_two_commands_verbatim():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    install = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/softaudit run"
    tests = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/python -m pytest -q"
    assert install in text.splitlines() and tests in text.splitlines()
    assert tests in (ROOT / ".ci" / "run").read_text().splitlines()  # (CI runs the README's test command)
    assert "source .venv/bin/activate" in text


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_no_dated_measurement_in_the_package_or_its_metadata():
    """Measurements and their dates live in docs/benchmarks.md and CHANGELOG.md, never in code or pyproject.toml."""
    files = [ROOT / "pyproject.toml", README, *sorted((ROOT / "softaudit").rglob("*.py"))]
    dated = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in files
        for n, line in enumerate(f.read_text().splitlines(), 1)
        if DATE.search(line)
    ]
    assert not dated, f"a date in {dated}"


def test_the_date_check_finds_a_date():
    assert DATE.search("# measured 65 s on 2026-11-28") and not DATE.search("version 2.4.1, 128 KiB")


# ---- links


LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # (not inside code blocks)
    return [a or b for a, b in LINK.findall(text)]


def test_the_link_pattern_finds_links_and_images():
    page = ROOT / "build" / "link-sample.md"
    page.parent.mkdir(exist_ok=True)
    page.write_text("see [a](docs/a.md#x) and ![pic](docs/report.png)\n```\n[not](inside.md)\n```\n")
    try:
        assert links(page) == ["docs/a.md#x", "docs/report.png"]
    finally:
        page.unlink()


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_lands_on_a_file_and_its_heading(page):
    for target in links(page):
        if re.match(r"[a-z]+:", target):  # (http:, https:, mailto:)
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
        if anchor and resolved.suffix == ".md":
            assert anchor in anchors(resolved), f"{page.relative_to(ROOT)} links to {target}: no such heading"


def anchors(page: Path) -> set[str]:
    """The ids MkDocs gives the page's headings (Python-Markdown's toc slugify)."""
    found = set()
    for line in page.read_text().splitlines():
        if m := re.match(r"#+ (.*)", line):
            slug = re.sub(r"[^\w\s-]", "", m[1]).strip().lower()
            found.add(re.sub(r"[-\s]+", "-", slug))
    return found


def test_every_docs_page_is_in_the_site_nav():
    """mkdocs build --strict (in .ci/run) fails on a page left out; this says which, without mkdocs installed."""
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in sorted((ROOT / "docs").rglob("*.md")):
        name = page.relative_to(ROOT / "docs").as_posix()
        assert re.search(rf"[:\s]{re.escape(name)}\s*$", nav, re.M), f"docs/{name} is not in mkdocs.yml's nav"


# ---- examples


def blocks(page: Path, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", page.read_text(), re.S | re.M)


#: Python blocks that continue another (a name it defines) or define a test: not run alone, by their first line.
FRAGMENTS = {
    ("docs/metrics.md", "from softaudit.worst import replay"),  # (result and key: docs/audit.md's example)
    ("docs/policy.md", '@softaudit.candidate(kind="attention", conventions={"causal"'),
    ("docs/api/pytest.md", "def test_my_softmax(assert_accurate):"),
}


def example_key(page: Path, block: str) -> tuple[str, str]:
    return page.relative_to(ROOT).as_posix(), block.splitlines()[0][:60]


def python_examples():
    for page in PAGES:
        for i, block in enumerate(blocks(page, "python")):
            if example_key(page, block) not in FRAGMENTS:
                yield pytest.param(block, id=f"{page.relative_to(ROOT)}[{i}]")


def test_the_fragments_left_out_are_there():
    assert {example_key(page, b) for page in PAGES for b in blocks(page, "python")} >= FRAGMENTS


@pytest.mark.parametrize("code", list(python_examples()))
def test_a_python_example_runs(code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "example"}
    exec(compile(code, "<example>", "exec"), namespace)


def commands():
    """Every `softaudit ...` command line in the README's and the docs' shell and terminal blocks."""
    for page in PAGES:
        for lang in ("bash", "text", ""):
            for block in blocks(page, lang):
                for line in block.replace("\\\n", " ").splitlines():
                    line = re.sub(r"^\$ ", "", line.strip())
                    line = re.sub(r"^(\w+=\S+ )+", "", line)  # (an environment variable set for the command)
                    for part in line.split("&&"):
                        if not part.strip().startswith(("softaudit ", ".venv/bin/softaudit")):
                            continue
                        words = shlex.split(part, comments=True)
                        if words[0] in ("softaudit", ".venv/bin/softaudit"):
                            yield pytest.param(words[1:], id=f"{page.relative_to(ROOT)}: {shlex.join(words)[:60]}")


@pytest.mark.parametrize("args", list(commands()))
def test_a_command_shown_parses(args, tmp_path, monkeypatch):
    """Each command's options exist and take the values shown (nothing runs: click only parses)."""
    from softaudit.cli import main

    monkeypatch.chdir(tmp_path)
    if not args or args[0].startswith("-"):
        main.make_context("softaudit", list(args) or ["--help"], resilient_parsing=True)
        return
    command = main.commands[args[0]]
    command.make_context(args[0], list(args[1:]), resilient_parsing=False)


def test_the_readme_first_audit_prints_what_it_shows(tmp_path):
    """The README's my_kernels.py, audited by the command it shows, prints its counts and findings as shown."""
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    text = README.read_text()
    source = next(b for b in blocks(README, "python") if b.startswith("# my_kernels.py"))
    (tmp_path / "my_kernels.py").write_text(source)
    (transcript,) = [b for b in blocks(README, "text") if b.startswith("$ softaudit run my_kernels.py")]
    command, *shown = transcript.splitlines()
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "softaudit", *shlex.split(command)[2:]],  # ("$ softaudit ..."),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr[-2000:]  # (a row failed, as the README says)
    printed = done.stdout.splitlines()
    for line in shown:
        assert line in printed, f"the README shows {line!r}; the command printed:\n{done.stdout}"
    assert "exit code is 1" in text
