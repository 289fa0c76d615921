"""One source for defaults: the command line's options, choices and defaults, the [tool.softaudit] keys,
audit()'s and hunt()'s keywords, the policy's and the gate's defaults all agree with softaudit/settings.py."""

import dataclasses
import inspect

import click
import pytest
from click.testing import CliRunner

import softaudit
import softaudit.hunt
import softaudit.runner
from softaudit import gate, settings
from softaudit.cli import main, read_config
from softaudit.hunt import hunt
from softaudit.policy import Policy

#: Options that are no setting: what a command does with its result, and how much it prints.
NOT_SETTINGS = {"update_baseline", "quiet", "verbose"}
#: audit()'s keywords that are no setting: objects a caller passes, or what only the API offers.
AUDIT_ONLY = {"policy", "progress", "cache", "stop"}


class Called(Exception):
    """Raised by the stand-in for audit() or hunt(): the command line got as far as calling it."""


def called_with(monkeypatch, tmp_path, module, function: str, real, command: list[str]) -> dict:
    """The arguments the command line gives `module.function` when nothing is set (no option, no config)."""
    seen = {}

    def stand_in(*args, **kwargs):
        seen.update(inspect.signature(real).bind(*args, **kwargs).arguments)
        raise Called

    monkeypatch.setattr(module, function, stand_in)
    monkeypatch.chdir(tmp_path)
    assert read_config(tmp_path) == {}  # (no pyproject.toml above the test's folder)
    result = CliRunner().invoke(main, command)
    assert isinstance(result.exception, Called), result.output
    return seen


def test_run_passes_every_settings_default_to_audit(monkeypatch, tmp_path):
    seen = called_with(monkeypatch, tmp_path, softaudit.runner, "audit", softaudit.runner.audit, ["run"])
    for key, setting in settings.SETTINGS.items():
        if setting.keyword and setting.keyword in seen and key != "cache_dir":  # (the folder, resolved: below)
            assert seen[setting.keyword] == settings.default(key), key
    assert seen["cache_dir"] == (softaudit._store.folder() or "off")  # (the default folder, where it is kept)
    assert seen["policy"] == Policy()


def test_hunt_passes_every_settings_default_to_hunt(monkeypatch, tmp_path):
    seen = called_with(monkeypatch, tmp_path, softaudit.hunt, "hunt", hunt, ["hunt"])
    keywords = {s.keyword or key: key for key, s in settings.SETTINGS.items() if "hunt" in s.commands and key != "out"}
    assert set(seen) - {"progress"} == set(keywords)
    for keyword, key in keywords.items():
        assert seen[keyword] == settings.default(key, "hunt"), key


@pytest.mark.parametrize("command", ["run", "hunt"])
def test_each_option_is_a_setting_with_its_choices(command):
    """Every option of run and hunt but a few is a setting of that command, and every such setting an option."""
    params = {p.name: p for p in main.commands[command].params if p.name not in NOT_SETTINGS}
    assert set(params) == {key for key, s in settings.SETTINGS.items() if command in s.commands}
    for key, param in params.items():
        if isinstance(param.type, click.Choice):
            assert tuple(param.type.choices) == settings.choices(key), key
        else:
            assert not settings.choices(key), f"--{key} takes any value, but the setting has choices"


@pytest.mark.parametrize("command", ["run", "hunt"])
def test_the_help_says_each_settings_default(command):
    text = CliRunner().invoke(main, [command, "--help"], terminal_width=1000).output
    for key in ("dtypes", "timeout", "corpus", "out"):
        shown = settings.default(key, command)
        shown = " ".join(shown) if isinstance(shown, tuple) else f"{shown:g}" if isinstance(shown, float) else shown
        assert f"default {shown}" in text or f"default: {shown}" in text, key


def test_audits_keywords_are_the_settings_with_their_defaults():
    parameters = inspect.signature(softaudit.audit).parameters
    keywords = {s.keyword: key for key, s in settings.SETTINGS.items() if s.keyword}
    assert set(parameters) == set(keywords) | AUDIT_ONLY
    for keyword, key in keywords.items():
        assert parameters[keyword].default == settings.audit_default(key), key
    assert parameters["corpus"].default is None  # (the library reads no folder it was not given)


def test_hunts_keywords_default_as_the_hunt_command_does():
    """(hunt() takes every setting of the hunt command but out, which the command line writes to)"""
    parameters = inspect.signature(hunt).parameters
    for key, setting in settings.SETTINGS.items():
        if "hunt" in setting.commands and key != "out":
            assert parameters[setting.keyword or key].default == settings.default(key, "hunt"), key


def test_the_policy_and_the_gate_default_to_the_settings():
    defaults = {f.name: f.default for f in dataclasses.fields(Policy)}
    for key in settings.POLICY_KEYS:
        assert defaults[key] == settings.default(key), key
    assert gate.Tolerance().relative == settings.default("tolerance")


def test_every_setting_is_a_config_key_checked_by_its_rule(tmp_path):
    for key in settings.SETTINGS:
        (tmp_path / "pyproject.toml").write_text(f"[tool.softaudit]\n{key} = {{ nested = 1 }}\n")
        with pytest.raises(click.ClickException, match=f"\\[tool.softaudit\\] {key} must be"):
            read_config(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.softaudit]\nformats = ['csv', 'pdf']\n")
    with pytest.raises(click.ClickException, match="formats must be a list of strings among csv, html, md"):
        read_config(tmp_path)


@pytest.mark.parametrize("command", ["run", "hunt"])
def test_each_options_flag_and_help_are_its_settings(command):
    """An option's flag and help are written once, in its setting: the command line makes the option from them,
    the default in the help read from the setting's default for that command."""
    for param in main.commands[command].params:
        if param.name in NOT_SETTINGS or not isinstance(param, click.Option):
            continue
        assert param.opts == [settings.flag(param.name)], param.name
        assert param.help == settings.help_text(param.name, command), param.name
        setting = settings.SETTINGS[param.name]
        assert param.multiple == (setting.type is list or param.name == "kind"), param.name
    assert settings.help_text("timeout", "hunt") == "seconds per candidate call (default 10)"
    assert settings.help_text("dtypes", "hunt") == "dtype to hunt in (repeatable; default float32)"
    assert settings.flag("min_ulp") == "--min-ulp" and settings.flag("families") == "--family"


def test_a_bounded_number_is_checked_before_the_audit(tmp_path, monkeypatch):
    """--samples 0 is one line naming the rule, as --timeout -1 is, said before anything runs."""
    monkeypatch.chdir(tmp_path)
    mistakes = (("--samples", "0", "must be an integer > 0"), ("--timeout", "-1", "must be a number > 0"))
    for option, value, rule in mistakes:
        result = CliRunner().invoke(main, ["run", option, value])
        assert result.exit_code == 2 and f"{rule}, got {value}" in result.output, result.output
