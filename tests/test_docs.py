"""The results table's columns are exactly the ones docs/metrics.md defines, in its `| column | definition |` tables."""

import re
from pathlib import Path

import softaudit
from softaudit.results import COLUMNS

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


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


README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_lists_every_config_key_and_every_option_of_run_and_hunt():
    import click

    from softaudit.cli import main
    from softaudit.settings import SETTINGS

    text = README.read_text()
    keys = re.search(r"^Keys: (.*?)\(and budget, for `hunt`\)\.$", text, re.S | re.M)[1]
    listed = sorted(k.strip() for k in keys.replace("\n", " ").split(",") if k.strip())
    assert listed == sorted(set(SETTINGS) - {"budget"})
    for command in ("run", "hunt"):
        for param in main.commands[command].params:
            if isinstance(param, click.Option):
                assert any(f"`{opt}" in text for opt in param.opts), f"{command} {param.opts[0]} is not in the README"
