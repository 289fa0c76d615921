"""The pytest plugin (entry point pytest11): an `assert_accurate` fixture. Light to import: nothing heavy loads
until a test uses it."""

import pytest


@pytest.fixture
def assert_accurate():
    """softaudit.assert_accurate, as a fixture."""
    from ._assertions import assert_accurate as check

    return check
