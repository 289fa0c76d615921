"""The settings a run takes, each defined once: its [tool.softaudit] key, its type and rule, its default.

The command line's options, their choices and defaults, the keys [tool.softaudit] accepts and softaudit.audit()'s
keywords all come from `SETTINGS` (command line > config > these defaults); so do softaudit.Policy's defaults and
the gate's tolerance. tests/test_settings.py checks that they agree. The module imports nothing heavy: the
command line reads it as it starts.
"""

from __future__ import annotations

import dataclasses
import math

from ._report_files import FILE_FORMATS, FORMATS

SUITES = ("quick", "default", "full")
FULLY_MASKED_RULES = ("zeros", "nan", "uniform", "any")
ISOLATIONS = ("worker", "none")
#: The settings that are softaudit.Policy's fields (the command line builds the policy from them).
POLICY_KEYS = ("factor", "min_ulp", "defect_fraction", "fully_masked", "strict", "require")
REQUIREMENTS = ("deterministic", "batch-invariant", "split-invariant")
_SAME = object()  # (a default that is the command line's)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting. default: softaudit run's when neither the command line nor [tool.softaudit] sets it (None:
    unset); hunt_default: softaudit hunt's, where it differs. bound: a number must be > 0 (">") or >= 0 (">=").
    keyword: audit()'s keyword taking it ("": none); audit_default: audit()'s default where it differs from the
    command line's. words: the words a number setting also takes ("auto" workers: every core this process may use)."""

    type: type
    default: object = None
    choices: tuple = ()
    bound: str = ""
    commands: tuple = ("run",)
    hunt_default: object = _SAME
    keyword: str = ""
    audit_default: object = _SAME
    words: tuple = ()


_BOTH = ("run", "hunt")
SETTINGS = {
    "targets": Setting(list, commands=_BOTH, keyword="targets"),
    "kind": Setting(str, commands=_BOTH, keyword="kind"),
    "dtypes": Setting(
        list, ("float16", "bfloat16", "float32", "float64"), commands=_BOTH, hunt_default=("float32",), keyword="dtypes"
    ),
    "suite": Setting(str, "default", SUITES, keyword="suite"),
    "cases": Setting(list, keyword="cases"),
    "families": Setting(list, keyword="families"),
    "out": Setting(str, "reports", commands=_BOTH),
    "formats": Setting(list),  # choices and default: softaudit/_report_files.py's (see `choices`, `default`)
    "baseline": Setting(str),
    "factor": Setting(float, 2.0, bound=">"),
    "min_ulp": Setting(float, 1.0, bound=">="),
    "defect_fraction": Setting(float, 0.25, bound=">="),
    "fully_masked": Setting(str, "zeros", FULLY_MASKED_RULES),
    "strict": Setting(bool, False),
    "require": Setting(list, (), REQUIREMENTS),
    "timeout": Setting(float, 60.0, bound=">", commands=_BOTH, hunt_default=10.0, keyword="timeout"),
    "seed": Setting(int, 0, keyword="seed"),
    # Production shapes audited by sampled rows (softaudit/sampled.py) in place of the families.
    "shapes": Setting(list),
    "samples": Setting(int, 256, bound=">"),
    "tolerance": Setting(float, 0.1, bound=">="),
    # The library reads no folder it was not given: audit() replays a corpus only when asked.
    "corpus": Setting(str, "reports/corpus", commands=_BOTH, keyword="corpus", audit_default=None),
    "budget": Setting(float, 60.0, bound=">", commands=("hunt",)),
    "cache_dir": Setting(str, keyword="cache_dir"),
    "device": Setting(str, commands=_BOTH, keyword="device"),
    "isolation": Setting(str, "worker", ISOLATIONS, commands=_BOTH, keyword="isolation"),
    "memory_limit": Setting(int, bound=">", commands=_BOTH, keyword="memory_limit_mib"),
    "workers": Setting(int, 1, bound=">", commands=_BOTH, keyword="workers", words=("auto",)),
    "scheduler": Setting(str, commands=_BOTH, keyword="scheduler"),
}
_TYPE_NAMES = {list: "a list of strings", str: "a string", float: "a number", int: "an integer", bool: "true or false"}


def default(key: str, command: str = "run"):
    """A setting's default for `command` ("run" or "hunt"); the formats' is every format that writes a file."""
    if key == "formats":
        return FILE_FORMATS
    setting = SETTINGS[key]
    return setting.hunt_default if command == "hunt" and setting.hunt_default is not _SAME else setting.default


def audit_default(key: str):
    """audit()'s default for a setting it takes as a keyword."""
    setting = SETTINGS[key]
    return setting.default if setting.audit_default is _SAME else setting.audit_default


def choices(key: str) -> tuple:
    """The values a setting allows (() : any value of its type); the formats' are softaudit/_report_files.py's."""
    if key == "formats":
        return FORMATS
    return SETTINGS[key].choices


def requirement(key: str) -> str:
    """What a setting's value must be, said to the user: "must be a number > 0"."""
    setting = SETTINGS[key]
    if setting.choices:
        return f"must be one of {', '.join(setting.choices)}"
    bound = f" {setting.bound} 0" if setting.bound else ""
    if key == "formats":
        bound = f" among {', '.join(choices(key))}"
    words = "".join(f" or {word}" for word in setting.words)
    return f"must be {_TYPE_NAMES[setting.type]}{bound}{words}"


def valid(key: str, value) -> bool:
    """Whether `value` is right for the setting `key`: one of its words, or its type (a bool is no number here,
    though Python says it is an int), its choices and, for a number, its bound; nan and infinity pass no bound."""
    setting, allowed = SETTINGS[key], choices(key)
    if isinstance(value, str) and value in setting.words:
        return True
    if setting.type is list:
        return isinstance(value, list) and all(isinstance(v, str) and (not allowed or v in allowed) for v in value)
    if allowed:
        return value in allowed
    if setting.type not in (int, float):
        return isinstance(value, setting.type)
    if isinstance(value, bool) or not isinstance(value, int if setting.type is int else (int, float)):
        return False
    if not setting.bound:
        return True
    return math.isfinite(value) and (value > 0 if setting.bound == ">" else value >= 0)
