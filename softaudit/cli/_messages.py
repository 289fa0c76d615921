"""What the command line says besides results: a user's mistake in one line (exit 2), a warning in one line, and
softaudit's own Python warnings said the same way."""

from __future__ import annotations

import warnings

import click


class ConfigError(click.ClickException):
    """A usage or configuration error: one line, exit 2."""

    exit_code = 2


def warn(line: str) -> None:
    click.echo(f"Warning: {line}", err=True)


def reason(exc: OSError) -> str:
    """Why a file operation failed, in a few words ("Permission denied")."""
    return exc.strerror or " ".join(str(exc).split())


_python_warning = warnings.showwarning


def show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """softaudit's own warnings ("softaudit: ...") as one line for the user, as `warn` writes them; others as
    Python shows them."""
    text = str(message)
    if text.startswith("softaudit: "):
        warn(text.removeprefix("softaudit: "))
    else:
        _python_warning(message, category, filename, lineno, file, line)
