"""Devices: framework candidates run on the run's device unless pinned; JAX is placed explicitly; a device that is
unknown or absent is one line before the audit starts."""

import dataclasses

import numpy as np
import pytest

import softaudit
from softaudit.adapters import _bridge
from softaudit.runner import candidates_for


@pytest.mark.parametrize(
    "device, parsed",
    [(None, ("cpu", 0)), ("cpu", ("cpu", 0)), ("cuda", ("cuda", 0)), ("cuda:1", ("cuda", 1)), ("gpu", ("cuda", 0))],
)
def test_device_names(device, parsed):
    assert _bridge.parse_device(device) == parsed


@pytest.mark.parametrize("device", ["tpu", "cuda:x", "cpu:1", "CUDA", ""])
def test_an_unknown_device_names_those_there_are(device):
    with pytest.raises(ValueError, match=f"^unknown device {device!r}; known: cpu, cuda, cuda:N, gpu$"):
        softaudit.audit("softaudit.candidates.softmax:naive", device=device)


def test_framework_candidates_get_the_run_device_unless_pinned_and_numpy_ones_stay():
    def f(x, axis=-1):
        return x

    free = softaudit.Candidate("softmax", "free", f, "torch")
    pinned = softaudit.Candidate("softmax", "pinned", f, "torch", "cpu")
    plain = softaudit.Candidate("softmax", "plain", f)
    found = candidates_for([free, pinned, plain], None, "cpu")
    assert [c.device for c in found] == ["cpu", "cpu", None]
    assert found[0] == dataclasses.replace(free, device="cpu") and found[1] is pinned and found[2] is plain


def test_a_gpu_for_numpy_candidates_alone_asks_for_no_framework():
    assert len(candidates_for("softaudit.candidates.softmax", None, "cuda")) == 9  # numpy runs where it runs


@pytest.mark.parametrize("framework", ["torch", "jax"])
def test_an_absent_gpu_is_one_line_before_the_audit(framework):
    pytest.importorskip(framework)
    if _has_gpu(framework):
        pytest.skip("a GPU is present")
    called = []

    def f(x, axis=-1):
        called.append(1)
        return x

    for device in ("cuda", "gpu", "cuda:3"):
        with pytest.raises(ValueError, match=f"^device {device!r} is not available: {framework} sees no CUDA GPU$"):
            softaudit.audit(softaudit.Candidate("softmax", "f", f, framework), device=device)
    pinned = softaudit.Candidate("softmax", "f", f, framework, "cuda")
    with pytest.raises(ValueError, match=f"{framework} sees no CUDA GPU"):
        softaudit.audit(pinned)
    assert not called


def _has_gpu(framework: str) -> bool:
    try:
        _bridge.check_device(framework, "cuda")
    except ValueError:
        return False
    return True


def test_jax_arrays_are_placed_on_the_cpu_device_asked_for():
    jax = pytest.importorskip("jax")
    seen = []

    @softaudit.candidate(kind="softmax", framework="jax")
    def placed(x, axis=-1):
        seen.append(x.devices())
        return jax.nn.softmax(x, axis=axis)

    for device in (None, "cpu"):
        seen.clear()
        table = softaudit.audit(
            placed, dtypes=["float32"], suite="quick", families=["textbook"], device=device, isolation="none"
        ).table  # (the candidate records what it saw: in this process)
        assert set(table.verdict) == {"pass"} and seen
        assert all(devices == {jax.devices("cpu")[0]} for devices in seen)


def test_torch_tensors_are_on_the_cpu_device_asked_for():
    pytest.importorskip("torch")
    seen = []

    @softaudit.candidate(kind="softmax", framework="torch")
    def placed(x, axis=-1):
        seen.append(x.device.type)
        return x.softmax(axis)

    softaudit.audit(placed, dtypes=["float32"], suite="quick", families=["textbook"], device="cpu", isolation="none")
    assert seen and set(seen) == {"cpu"}


def test_device_cpu_gives_the_same_table_as_none():
    """(torch: tests/test_cli.py, through the command line.)"""
    pytest.importorskip("jax")
    options = {"dtypes": ["float16"], "suite": "quick", "families": ["textbook"]}
    plain = softaudit.audit("softaudit.frameworks.jax", **options).table.drop(columns="seconds")
    on_cpu = softaudit.audit("softaudit.frameworks.jax", device="cpu", **options).table.drop(columns="seconds")
    assert len(plain) == 8 and plain.equals(on_cpu)  # 4 forward candidates and their gradients


def test_the_cudnn_backend_is_a_candidate_that_skips_on_the_cpu():
    pytest.importorskip("torch")
    table = softaudit.audit(
        "softaudit.frameworks.torch:sdpa_bool_cudnn", dtypes=["float32"], suite="quick", families=["attn_masks"]
    ).table
    assert list(table.verdict) == ["skip"] and table.note[0]
    assert np.all(table.candidate == "torch.sdpa_bool_cudnn")


PLACEMENT = """
import jax
import softaudit

jax.config.update("jax_default_device", jax.devices("cpu")[1])  # JAX's default is not where a CPU audit runs
seen = []

@softaudit.candidate(kind="softmax", framework="jax")
def placed(x, axis=-1):
    seen.append(x.devices())
    return jax.nn.softmax(x, axis=axis)

table = softaudit.audit(placed, dtypes=["float32"], suite="quick", families=["textbook"], isolation="none").table
assert set(table.verdict) == {"pass"}, table
print(sorted({(d.platform, d.id) for devices in seen for d in devices}))
"""


def test_jax_is_placed_explicitly_not_on_its_default_device():
    """With two CPU devices and JAX's default the second, a CPU audit's arrays are still on the first."""
    import os
    import subprocess
    import sys

    pytest.importorskip("jax")
    env = os.environ | {"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", PLACEMENT], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[('cpu', 0)]", done.stdout
