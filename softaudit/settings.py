"""The settings a run takes, each defined once: its [tool.softaudit] key, its type and rule, its default, its option's
flag and help.

The command line's options (softaudit/cli/_options.py makes each from its setting), their choices and defaults,
the keys [tool.softaudit] accepts and softaudit.audit()'s keywords all come from `SETTINGS` (command line > config >
these defaults); so do softaudit.Policy's defaults and the gate's tolerance. tests/test_settings.py checks that they
agree. The module imports nothing heavy: the command line reads it as it starts.
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
    command line's. words: the words a number setting also takes ("auto" workers: every core this process may use).
    flag: its command-line option ("": the key, dashed: --min-ulp); help: the option's help, "{default}" standing for
    the command's default as `shown` says it; hunt_help: softaudit hunt's, where it differs (softaudit/cli/ makes
    each option from these: tests/test_settings.py)."""

    type: type
    default: object = None
    choices: tuple = ()
    bound: str = ""
    commands: tuple = ("run",)
    hunt_default: object = _SAME
    keyword: str = ""
    audit_default: object = _SAME
    words: tuple = ()
    flag: str = ""
    help: str = ""
    hunt_help: str = ""


_BOTH = ("run", "hunt")
SETTINGS = {
    # (the command's arguments: no option)
    "targets": Setting(list, commands=_BOTH, keyword="targets"),
    "kind": Setting(
        str, commands=_BOTH, keyword="kind", help="kind of the targets' functions (needed for unmarked ones)"
    ),
    "dtypes": Setting(
        list,
        ("float16", "bfloat16", "float32", "float64"),
        commands=_BOTH,
        hunt_default=("float32",),
        keyword="dtypes",
        flag="--dtype",
        help="dtype to audit in (repeatable; default {default})",
        hunt_help="dtype to hunt in (repeatable; default {default})",
    ),
    "suite": Setting(str, "default", SUITES, keyword="suite", help="case sizes (default: {default})"),
    "cases": Setting(list, keyword="cases", help="a case file, .npy or .npz (repeatable)"),
    "families": Setting(list, keyword="families", flag="--family", help="only this built-in family (repeatable)"),
    "out": Setting(
        str,
        "reports",
        commands=_BOTH,
        help="folder for the reports (default: {default})",
        hunt_help="folder for hunt.csv and hunt.md (default {default})",
    ),
    # choices and default: softaudit/_report_files.py's (see `choices`, `default`)
    "formats": Setting(
        list, flag="--format", help="report format (repeatable; default: every file format; github prints annotations)"
    ),
    "baseline": Setting(str, help="baseline JSON: fail only on regressions against it"),
    "factor": Setting(
        float,
        2.0,
        bound=">",
        help="fail past factor x the standard same-dtype algorithms' proven error bound (their measured error in "
        "16-bit dtypes), warn past factor x best practice's (default {default})",
    ),
    "min_ulp": Setting(float, 1.0, bound=">=", help="max ULP error that never warns (default {default})"),
    "defect_fraction": Setting(
        float,
        0.25,
        bound=">=",
        help="the floor of the fail line measured in 16-bit dtypes, 2**(fraction x precision) x the conditioning "
        "(default {default}: a quarter of the significand)",
    ),
    "fully_masked": Setting(
        str, "zeros", FULLY_MASKED_RULES, help="required output of a fully masked row (default {default})"
    ),
    "strict": Setting(bool, False, help="a warn fails the run too (exit 1)"),
    "require": Setting(
        list,
        (),
        REQUIREMENTS,
        help="a difference between runs of the same call (deterministic), between batches (batch-invariant) or "
        "between key splits (split-invariant) fails the row, rather than a note (repeatable)",
    ),
    "timeout": Setting(
        float,
        60.0,
        bound=">",
        commands=_BOTH,
        hunt_default=10.0,
        keyword="timeout",
        help="seconds per candidate call (default {default})",
    ),
    "seed": Setting(int, 0, keyword="seed", help="varies the random families (default {default})"),
    # Production shapes audited by sampled rows (softaudit/sampled.py) in place of the families.
    "shapes": Setting(
        list,
        flag="--shape",
        help="audit this production shape by sampled rows instead of the families, e.g. "
        "attention:1x32x32768x128,kv_heads=8 or softmax:8x131072 (repeatable; options kv_heads=N, lq=N, causal, "
        "scale=S)",
    ),
    "samples": Setting(int, 256, bound=">", help="rows (queries) sampled per shape (default {default})"),
    "tolerance": Setting(
        float, 0.1, bound=">=", help="relative growth of max ULP error the gate accepts (default {default})"
    ),
    # The library reads no folder it was not given: audit() replays a corpus only when asked.
    "corpus": Setting(
        str,
        "reports/corpus",
        commands=_BOTH,
        keyword="corpus",
        audit_default=None,
        help="folder of hunt findings replayed as the family `corpus` (default {default})",
        hunt_help="folder for the failures found (default {default})",
    ),
    "budget": Setting(
        float, 60.0, bound=">", commands=("hunt",), help="seconds for the whole search (default {default})"
    ),
    "cache_dir": Setting(
        str,
        keyword="cache_dir",
        help="folder keeping prepared cases and references for later runs ('off': none; default "
        "$SOFTAUDIT_CACHE_DIR, else ~/.cache/softaudit)",
    ),
    "device": Setting(
        str,
        commands=_BOTH,
        keyword="device",
        help="where torch and jax candidates not pinned to a device run: cpu, cuda, cuda:N, gpu (default cpu)",
    ),
    "isolation": Setting(
        str,
        "worker",
        ISOLATIONS,
        commands=_BOTH,
        keyword="isolation",
        help="where candidates run: worker (a process of its own: a crash or hang is an error row) or none (in "
        "this process); default {default}",
    ),
    "memory_limit": Setting(
        int,
        bound=">",
        commands=_BOTH,
        keyword="memory_limit_mib",
        help="the worker's memory limit in MiB (address space; default none; leave it off for GPU candidates)",
    ),
    "workers": Setting(
        int,
        1,
        bound=">",
        commands=_BOTH,
        keyword="workers",
        words=("auto",),
        help="units run in this many processes on this machine, or auto: one per core softaudit may use, in "
        "softaudit's process where that is one or the run has one unit (default {default}: in softaudit's process)",
    ),
    "scheduler": Setting(
        str,
        commands=_BOTH,
        keyword="scheduler",
        help="a Dask scheduler's address (tcp://HOST:PORT): units run on its workers (needs pip install "
        "'softaudit[dask]'; --workers is then ignored)",
    ),
}
_TYPE_NAMES = {list: "a list of strings", str: "a string", float: "a number", int: "an integer", bool: "true or false"}


def default(key: str, command: str = "run"):
    """A setting's default for `command` ("run" or "hunt"); the formats' is every format that writes a file."""
    if key == "formats":
        return FILE_FORMATS
    setting = SETTINGS[key]
    return setting.hunt_default if command == "hunt" and setting.hunt_default is not _SAME else setting.default


def shown(key: str, command: str = "run") -> str:
    """A setting's default as a help text says it: "60", "float16 bfloat16", "reports/corpus"."""
    value = default(key, command)
    if isinstance(value, (tuple, list)):
        return " ".join(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def flag(key: str) -> str:
    """A setting's command-line option: "--dtype", "--min-ulp"."""
    return SETTINGS[key].flag or "--" + key.replace("_", "-")


def help_text(key: str, command: str = "run") -> str:
    """A setting's option help for `command`, its default said as that command's."""
    setting = SETTINGS[key]
    text = setting.hunt_help if command == "hunt" and setting.hunt_help else setting.help
    return text.format(default=shown(key, command))


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
