import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Tests never read or write the user's cache of prepared families; the ones about it name their own folder.
os.environ["SOFTAUDIT_CACHE_DIR"] = "off"


@pytest.fixture
def counted_references(monkeypatch):
    """An empty cache of prepared families in this process (each comes from the disk or is computed), and the list
    that gains an entry for each reference the runner computes."""
    from softaudit import prepare, reference

    monkeypatch.setattr(prepare, "_CACHE", type(prepare._CACHE)())
    calls = []
    # (the forward kinds' references, softaudit/kinds/_rows.py and _attention.py, import these where they call them)
    for name in ("evaluate", "evaluate_attention"):
        real = getattr(reference, name)
        monkeypatch.setattr(reference, name, lambda *a, real=real, **k: calls.append(1) or real(*a, **k))
    return calls


def units_on_the_workers(monkeypatch) -> None:
    """From now on, `workers` > 1 runs every unit in the worker processes, started at once (as a large plan's units
    mostly run once they have started): softaudit's own process runs none (execute/_lanes.py), so a test of what a
    worker process does sees a worker do it, whatever the plan's size."""
    from softaudit.execute import _lanes, _pool

    monkeypatch.setattr(_lanes, "SPREAD_AFTER", 0.0)
    monkeypatch.setattr(_lanes, "SPREAD_WORK", 0.0)
    monkeypatch.setattr(_pool.Local, "work", lambda self: False)


@pytest.fixture
def on_the_workers(monkeypatch):
    """units_on_the_workers for the test."""
    units_on_the_workers(monkeypatch)


@pytest.fixture(scope="session")
def quick_audit():
    """The built-ins' audit on the quick suite in the default dtypes, made once for the tests that read it (about
    100 s on a 2-core machine), with the RuntimeWarnings softaudit's process raised while making it."""
    import warnings

    import softaudit

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        table = softaudit.audit(suite="quick").table
    return table, [w for w in caught if issubclass(w.category, RuntimeWarning)]


@pytest.fixture(autouse=True)
def _no_progress_lines(monkeypatch):
    """Off a terminal a run writes a progress line every PACE seconds (softaudit/cli/_progress.py): a test's run
    that takes that long on a busy machine would find them in the output it reads. The tests of the lines set
    their own pace (tests/test_cli_progress.py)."""
    from softaudit.cli import _progress

    monkeypatch.setattr(_progress, "PACE", 1e6)
