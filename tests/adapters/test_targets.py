"""Loading targets: modules, files, functions; marked and unmarked; one clear error for each mistake."""

import textwrap

import pytest

import softaudit
from softaudit.adapters._targets import TargetError, load_target

MODULE = textwrap.dedent(
    '''
    import numpy as np
    import softaudit

    @softaudit.candidate(kind="softmax")
    def mine(x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    @softaudit.candidate(kind="logsumexp", name="custom name")
    def lse(x, axis=-1):
        return np.log(np.exp(x).sum(axis=axis))

    def helper(x, axis=-1):
        return x
    '''
)


@pytest.fixture
def target_file(tmp_path):
    path = tmp_path / "my_kernels.py"
    path.write_text(MODULE)
    return path


def test_a_file_gives_every_marked_function_in_order(target_file):
    found = load_target(str(target_file))
    assert [(c.kind, c.name) for c in found] == [("softmax", "my_kernels:mine"), ("logsumexp", "custom name")]
    assert [c.name for c in load_target(str(target_file), kind="logsumexp")] == ["custom name"]


def test_file_function_and_an_unmarked_function_with_a_kind(target_file):
    (one,) = load_target(f"{target_file}:mine")
    assert one.name.endswith("mine") and one.kind == "softmax"
    (helper,) = load_target(f"{target_file}:helper", kind="softmax")
    assert helper.name.endswith("helper")
    with pytest.raises(TargetError, match="not marked with @softaudit.candidate: give its kind"):
        load_target(f"{target_file}:helper")


def test_modules_and_module_functions():
    assert len(load_target("softaudit.candidates.softmax")) == 8
    (naive,) = load_target("softaudit.candidates.softmax:naive")
    assert naive.name == "softmax.naive"


def test_function_objects(target_file):
    def plain(x, axis=-1):
        return x

    (c,) = load_target(plain, kind="softmax")
    assert c.name.endswith("plain")


@pytest.mark.parametrize(
    "target, message",
    [
        ("no_such_module_xyz", "module 'no_such_module_xyz' does not import: ModuleNotFoundError"),
        ("softaudit.candidates.softmax:missing", "has no function 'missing'"),
        ("/nonexistent/kernels.py", "no such file"),
        ("json", "json has no function marked with @softaudit.candidate"),
    ],
)
def test_bad_targets_get_one_clear_message(target, message):
    with pytest.raises(TargetError, match=message):
        load_target(target)


def test_a_file_that_does_not_import(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import numpy as np\nraise RuntimeError('boom at import')\n")
    with pytest.raises(TargetError, match="broken.py does not import: RuntimeError: boom at import"):
        load_target(str(broken))


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown kind 'sparsemax'"):
        softaudit.candidate(kind="sparsemax")
