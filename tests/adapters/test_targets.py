"""Loading targets: modules, files, functions; marked and unmarked; one clear error for each mistake."""

import functools
import math
import sys
import textwrap

import numpy as np
import pytest

import softaudit
from softaudit.adapters._targets import TargetError, load_target

MODULE = textwrap.dedent(
    """
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
    """
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
    with pytest.raises(TargetError, match=r"not marked with @softaudit\.candidate: give its kind"):
        load_target(f"{target_file}:helper")


def test_modules_and_module_functions():
    assert len(load_target("softaudit.candidates.softmax")) == 9  # eight decorated, and online_b128 from a factory
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
    with pytest.raises(TargetError, match=r"broken\.py does not import: RuntimeError: boom at import"):
        load_target(str(broken))


def test_unknown_kind():
    with pytest.raises(ValueError, match="unknown kind 'sparsemax'"):
        softaudit.candidate(kind="sparsemax")


# --- Discovery: a module's candidates are those marked while it imports, a factory's products included. ---

HELPER = textwrap.dedent(
    '''
    import numpy as np
    import softaudit

    def _softmax(x, axis=-1):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    @softaudit.candidate(kind="softmax")
    def shared(x, axis=-1):
        return _softmax(x, axis)

    def make(block):
        """A factory: a new marked closure per call."""
        def blocked(x, axis=-1):
            return _softmax(x, axis)
        return softaudit.candidate(blocked, kind="softmax", name=f"blocked_{block}")

    made_in_helper = make(8)
    '''
)
KERNELS = textwrap.dedent(
    """
    import functools
    import math

    import softaudit
    from helper import _softmax, made_in_helper, make, shared  # a sibling module, imported as `python kernels.py` does

    b16 = make(16)
    b32 = make(32)
    alias = b16  # the same candidate under a second name: audited once
    part = softaudit.candidate(functools.partial(_softmax, axis=-1), kind="softmax", name="part")
    exp = softaudit.candidate(math.exp, kind="logsumexp")  # a builtin cannot take an attribute: a thin function
    """
)


@pytest.fixture
def two_files(tmp_path):
    (tmp_path / "helper.py").write_text(HELPER)
    (tmp_path / "kernels.py").write_text(KERNELS)
    yield tmp_path
    sys.modules.pop("helper", None)


def test_factory_products_belong_to_the_module_that_makes_them_and_imports_do_not(two_files):
    path = list(sys.path)
    found = load_target(str(two_files / "kernels.py"))
    assert [c.name for c in found] == ["blocked_16", "blocked_32", "part", "kernels:exp"]
    assert [c.source for c in found][:2] == [f"{two_files / 'kernels.py'}:b16", f"{two_files / 'kernels.py'}:b32"]
    assert sys.path == path, "the file's folder stays on sys.path only while it imports"
    assert [c.name for c in load_target(str(two_files / "helper.py"))] == ["helper:shared", "blocked_8"]
    (again,) = load_target(f"{two_files / 'kernels.py'}:b32")  # the source of a factory product loads it again
    assert again.name == "blocked_32"


def test_a_framework_op_imported_into_a_file_is_not_audited_twice_but_a_factory_product_is(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "gpu_kernels.py").write_text(
        "from softaudit.frameworks.torch import sdpa, softmax, sdpa_bool_math\n"
        "sdpa_flash_cuda = sdpa('bool', 'flash', device='cuda')\n"
    )
    (flash,) = load_target(str(tmp_path / "gpu_kernels.py"))
    assert (flash.name, flash.device, flash.framework) == ("torch.sdpa_bool_flash_cuda", "cuda", "torch")
    assert "torch.softmax" in [c.name for c in load_target("softaudit.frameworks.torch")]


def test_marking_a_function_another_module_marked_leaves_that_module_its_candidate(tmp_path):
    (tmp_path / "remark.py").write_text(
        "import softaudit\nfrom softaudit.candidates.softmax import naive\n"
        "mine = softaudit.candidate(naive, kind='softmax', name='my naive')\n"
    )
    (mine,) = load_target(str(tmp_path / "remark.py"))
    assert mine.name == "my naive"
    assert "softmax.naive" in [c.name for c in load_target("softaudit.candidates.softmax")]


def test_a_module_from_the_working_directory_imports_without_pythonpath(tmp_path, monkeypatch):
    package = tmp_path / "local_ops_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ops.py").write_text(HELPER)
    monkeypatch.chdir(tmp_path)
    path = list(sys.path)
    try:
        (shared,) = load_target("local_ops_pkg.ops:shared")
        assert [c.name for c in load_target("local_ops_pkg.ops")] == ["local_ops_pkg.ops:shared", "blocked_8"]
    finally:
        for name in ("local_ops_pkg", "local_ops_pkg.ops"):
            sys.modules.pop(name, None)
    assert shared.source == "local_ops_pkg.ops:shared" and sys.path == path


# --- A kind that is unknown, or that a target does not have, is an error naming the kinds there are. ---


def test_a_kind_the_module_does_not_have_names_the_kinds_it_has(target_file):
    with pytest.raises(TargetError, match=r"my_kernels.py has no attention candidate; its kinds: softmax, logsumexp$"):
        load_target(str(target_file), kind="attention")
    with pytest.raises(
        ValueError, match=r"^unknown kind 'sofmax'; known: softmax, log_softmax, logsumexp, masked_softmax"
    ):
        load_target(str(target_file), kind="sofmax")


@pytest.mark.parametrize("targets", [None, "softaudit.candidates.softmax", "softaudit.candidates.softmax:naive"])
def test_audit_raises_on_an_unknown_kind_before_anything_runs(targets):
    with pytest.raises(ValueError, match=r"^unknown kind 'sofmax'; known: softmax, log_softmax"):
        softaudit.audit(targets, kind="sofmax")


def test_audit_raises_on_a_target_without_the_kind(target_file):
    with pytest.raises(ValueError, match="has no attention candidate; its kinds: softmax, logsumexp"):
        softaudit.audit([str(target_file)], kind="attention")


# --- Any callable and any Candidate is a target; marking works on any callable. ---


def numpy_softmax(x, axis=-1):
    """A float64 softmax rounded once."""
    w = x.astype(np.float64)
    e = np.exp(w - w.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)


class Kernel:
    def __call__(self, x, axis=-1):
        return numpy_softmax(x, axis)


def quick(targets, **options):
    return softaudit.audit(targets, dtypes=["float16"], suite="quick", families=["textbook"], **options).table


def test_a_candidate_a_list_of_them_and_any_callable_are_targets():
    one = softaudit.Candidate("softmax", "mine", numpy_softmax)
    assert list(quick(one).candidate) == ["mine"]
    two = [one, softaudit.Candidate("softmax", "again", Kernel())]
    assert list(quick(two).candidate) == ["mine", "again"]
    with pytest.raises(TargetError, match="candidate mine is softmax, not attention"):
        quick(one, kind="attention")
    table = quick([functools.partial(numpy_softmax, axis=-1), Kernel()], kind="softmax")
    assert list(table.candidate) == [f"partial({__name__}:numpy_softmax)", f"{__name__}:Kernel"]
    assert set(table.verdict) == {"pass"}


def test_builtins_partials_methods_and_callable_objects_can_be_marked():
    exp = softaudit.candidate(math.exp, kind="softmax")  # a builtin takes no attribute: a thin function calling it
    assert exp is not math.exp and exp(0.0) == 1.0 and exp.__name__ == "exp" and exp.__doc__ == math.exp.__doc__
    (c,) = load_target(exp)
    assert c.kind == "softmax" and c.name == "math:exp"
    part = softaudit.candidate(functools.partial(numpy_softmax, axis=-1), kind="softmax", name="part")
    method = softaudit.candidate(Kernel().__call__, kind="softmax")
    obj = softaudit.candidate(Kernel(), kind="softmax", name="object")
    assert [load_target(t)[0].name for t in (part, method, obj)] == ["part", f"{__name__}:Kernel.__call__", "object"]
    assert load_target(part)[0].summary == "A float64 softmax rounded once."
    table = quick([part, method, obj])
    assert set(table.verdict) == {"pass"} and len(table) == 3
    with pytest.raises(TypeError, match="a candidate must be callable, got int"):
        softaudit.candidate(3, kind="softmax")


def test_a_file_of_unmarked_functions_says_how_to_name_one_and_lists_them(tmp_path):
    # (its own public functions: not an imported one, not a private one)
    kernels = tmp_path / "kernels.py"
    kernels.write_text(
        "from os.path import join\n\n\ndef softmax(x, axis=-1):\n    return x\n\n\n"
        "def _helper():\n    pass\n\n\ndef attend(q, k, v):\n    pass\n"
    )
    with pytest.raises(TargetError) as info:
        load_target(str(kernels))
    assert str(info.value).endswith(
        f"name one as {kernels}:FUNCTION and give its kind (--kind, kind=) (its functions: softmax, attend)"
    )
    with pytest.raises(TargetError, match=r"FUNCTION \(its functions: softmax, attend\)$"):
        load_target(str(kernels), kind="softmax")  # (the kind is given: naming the function is what is left)
