"""The install hint when a framework is missing."""

import importlib.util


def need(module: str, extra: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise ImportError(f"{module} is not installed: pip install 'softaudit[{extra}]'")
