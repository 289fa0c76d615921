"""The commands' options, made from softaudit/settings.py: each setting's flag, type, help and default are written
once there (as pytest's addoption takes them), and `options` turns them into click options; [tool.softaudit] is
read here, and `pick` says which value wins (command line > config > the setting's default)."""

from __future__ import annotations

import reprlib
import tomllib
from pathlib import Path

import click

from .. import settings
from ._messages import ConfigError


class Number(click.ParamType):
    """A numeric option held to the rule of its [tool.softaudit] key: `--timeout -1` is the user's mistake, said
    before the audit, not every candidate's "ran past the time limit"."""

    name = "number"

    def __init__(self, key: str):
        self.key = key

    def convert(self, value, param, ctx):
        if value in settings.SETTINGS[self.key].words:
            return value
        try:
            number = int(value) if settings.SETTINGS[self.key].type is int else float(value)
        except (TypeError, ValueError):
            number = None
        if number is None or not settings.valid(self.key, number):
            self.fail(f"{settings.requirement(self.key)}, got {value}", param, ctx)
        return number


def option(key: str, command: str = "run", **given):
    """The click option of a setting for `command`: its flag, its type (a list repeatable, choices a click.Choice, a
    bounded number a `Number`, true or false a flag), its help with the command's default. Unset on the command line
    it is None (or an empty tuple), so that [tool.softaudit] can set it (`pick`); `given` adds to click's keywords
    (a callback, a default where the command reads no config)."""
    setting = settings.SETTINGS[key]
    made: dict = {"help": settings.help_text(key, command)}
    if setting.type is list:
        made["multiple"] = True
    if settings.choices(key):
        made["type"] = click.Choice(settings.choices(key))
    elif setting.type is bool:
        made |= {"is_flag": True, "default": None}
    elif setting.type in (int, float):
        made["type"] = Number(key) if setting.bound or setting.words else setting.type
    return click.option(settings.flag(key), key, **(made | given))


def options(command: str, *items):
    """A command's options in the order its help lists them: each item a setting's key (`option`) or a click
    option of the command's own (what it does with its result, how much it prints)."""

    def decorate(function):
        for item in reversed(items):
            function = (option(item, command) if isinstance(item, str) else item)(function)
        return function

    return decorate


def one_kind(ctx, param, given):
    """--kind once: given twice, click would keep the last and drop the first without a word."""
    if len(given) > 1:
        raise click.BadParameter(f"takes one kind, got {', '.join(given)}: run once per kind", ctx, param)
    return given[0] if given else None


def known_kind(ctx, param, kind):
    """--kind of a listing: a kind softaudit has, or a usage error naming them (an empty listing reads as none)."""
    from .. import kinds

    if kind is not None:
        try:
            kinds.get(kind)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    return kind


def read_config(start: Path) -> dict:
    """[tool.softaudit] of the nearest pyproject.toml at or above `start` ({} when there is none)."""
    for folder in [start, *start.parents]:
        path = folder / "pyproject.toml"
        if path.is_file():
            try:
                data = tomllib.loads(path.read_text(encoding="utf-8")).get("tool", {}).get("softaudit", {})
            except tomllib.TOMLDecodeError as exc:
                raise ConfigError(f"{path}: {exc}") from None
            unknown = sorted(set(data) - set(settings.SETTINGS))
            if unknown:
                known = ", ".join(settings.SETTINGS)
                raise ConfigError(f"{path}: unknown key {unknown[0]!r} in [tool.softaudit]; known: {known}")
            for key, value in data.items():
                if not settings.valid(key, value):
                    problem = f"{settings.requirement(key)}, got {reprlib.repr(value)}"
                    raise ConfigError(f"{path}: [tool.softaudit] {key} {problem}")
            return data
    return {}


def pick(cli_value, config: dict, key: str, command: str = "run"):
    """Command line > config > the setting's default for the command (an empty tuple from a repeatable option
    counts as not given)."""
    if cli_value not in (None, ()):
        return cli_value
    return config.get(key, settings.default(key, command))


class Config:
    """[tool.softaudit] read once for a command: `config(key, given)` is `pick` for that command."""

    def __init__(self, command: str):
        self.command, self.data = command, read_config(Path.cwd())

    def __call__(self, key: str, given):
        return pick(given, self.data, key, self.command)
