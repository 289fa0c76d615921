"""The command line: thin. Parse, read [tool.softaudit], call the API, write reports, choose the exit code.

One module per command (run, hunt, compare, cases, candidates); their options are made from softaudit/settings.py
(`_options`), the reports written as one set by `_staging`, the terminal's summary printed by `_summary`, progress
shown by `_progress`. Exit codes, as ruff and click use them: 0 everything passed (or, with a baseline, nothing
regressed); 1 a verdict failed or a regression; 2 a usage or configuration error, said in one line; 130 interrupted
(Ctrl-C or SIGTERM: the finished rows are kept and written, marked interrupted).
"""

from __future__ import annotations

import warnings

import click

from . import candidates, cases, compare, hunt, run
from ._messages import ConfigError as ConfigError
from ._messages import show_warning
from ._options import read_config as read_config


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="softaudit")
def main():
    """softaudit: audit the numerical accuracy of softmax and attention implementations."""
    warnings.showwarning = show_warning


for _command in (run.run, hunt.hunt, compare.compare, cases.list_cases, candidates.list_candidates):
    main.add_command(_command)

__all__ = ["ConfigError", "main", "read_config"]
