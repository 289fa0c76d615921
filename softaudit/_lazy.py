"""Names a package loads when they are first read (PEP 562's module __getattr__): importing the package stays
cheap (marking a candidate loads neither the reference nor a framework; an isolated worker loads what a call needs)."""

from __future__ import annotations

import importlib
import sys


def first_use(package: str, public: dict[str, str], whole: tuple[str, ...] = ()):
    """The module __getattr__ of `package`: a name of `public` is imported from its module (relative to the package)
    when first read and kept in the package's namespace; a name in `whole` is that module itself."""

    def __getattr__(name: str):
        if name not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(public[name], package)
        value = module if name in whole else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
