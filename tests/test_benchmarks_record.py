"""benchmarks/_record.py: a benchmark's `--write` replaces its own section of docs/benchmarks.md and nothing else."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("_record", ROOT / "benchmarks" / "_record.py")
record = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(record)

PAGE = """# Benchmarks

Intro.

<!-- benchmark: a -->
## A

old a
<!-- end: a -->

<!-- benchmark: b -->
## B

old b
<!-- end: b -->

## History

**2026-11-01**: something.
"""

STAMP = {"date": "2026-12-01", "where": "a machine"}


def test_a_section_is_replaced_and_the_rest_kept_byte_for_byte(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(PAGE)
    record.write("a", "A", "python benchmarks/a.py --quick", "| x |\n|---|\n| 1 |", doc=doc, **STAMP)
    text = doc.read_text()
    new = "<!-- benchmark: a -->\n## A\n\n`python benchmarks/a.py --quick`\n\nLast run 2026-12-01 on a machine.\n\n"
    new += "| x |\n|---|\n| 1 |\n<!-- end: a -->\n"
    assert text == PAGE.replace("<!-- benchmark: a -->\n## A\n\nold a\n<!-- end: a -->\n", new)
    assert [p.name for p in tmp_path.iterdir()] == ["benchmarks.md"]  # (no temporary file left)


def test_a_new_section_goes_before_the_history(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text(PAGE)
    record.write("c", "C", "python benchmarks/c.py", "body", doc=doc, **STAMP)
    text = doc.read_text()
    assert text.index("<!-- end: b -->") < text.index("<!-- benchmark: c -->") < text.index("## History")
    record.write("c", "C", "python benchmarks/c.py", "body 2", doc=doc, **STAMP)  # (again: replaced, not added)
    assert doc.read_text().count("<!-- benchmark: c -->") == 1 and "body 2" in doc.read_text()


def test_the_command_leaves_out_write_and_the_table_escapes_pipes():
    assert record.command("bench_x.py", ["--quick", "--write", "--suite", "a b"]) == (
        "python benchmarks/bench_x.py --quick --suite 'a b'"
    )
    assert record.table(["a", "b"], [[1, "x|y"]]) == "| a | b |\n|---|---|\n| 1 | x\\|y |"


def test_every_section_of_the_committed_page_is_well_formed():
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    for name in ("bench_main_job", "bench_floor", "bench_reference", "bench_cache", "bench_isolation", "bench_workers"):
        assert text.count(f"<!-- benchmark: {name} -->") == 1 and text.count(f"<!-- end: {name} -->") == 1, name
        assert (ROOT / "benchmarks" / f"{name}.py").read_text().count("_record.write(") == 1, name
