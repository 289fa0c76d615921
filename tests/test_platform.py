"""The platform key names the frameworks the audited candidates loaded and the GPU they ran on, wherever they ran (an
isolated worker, worker processes, softaudit's own process), and no framework the run did not use: results.json,
the baseline and the gate read it from the run."""

import json
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest

import softaudit
from softaudit import _platform, gate
from softaudit.report import platform_key, write_reports

ROOT = Path(__file__).resolve().parents[1]
TORCH_RUN = ["softaudit.frameworks.torch:softmax", "--kind", "softmax", "--dtype", "float32", "--suite", "quick"]
TORCH_RUN += ["--family", "textbook", "--format", "json"]


def _run(folder: Path, *options: str) -> dict:
    """`softaudit run` of torch's softmax in a process of its own (so that nothing imported torch there before),
    its results.json."""
    done = subprocess.run(
        [sys.executable, "-m", "softaudit", "run", *TORCH_RUN, "--out", "out", *options],
        capture_output=True,
        text=True,
        cwd=folder,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((folder / "out" / "results.json").read_text())


@pytest.fixture(scope="module")
def torch_runs(tmp_path_factory):
    """Torch's softmax run twice from the command line (isolation "worker", the default): the first writes the
    baseline, the second is gated by it. (results.json of each, the baseline)"""
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("torch")
    first = _run(folder, "--baseline", "baseline.json", "--update-baseline")
    baseline = json.loads((folder / "baseline.json").read_text())
    return first, _run(folder, "--baseline", "baseline.json"), baseline


def test_a_torch_candidate_run_in_a_worker_names_torch_in_results_json_and_the_baseline(torch_runs):
    """softaudit's process never imports torch (the worker does): the key says which PyTorch was audited all the
    same."""
    first, _, baseline = torch_runs
    assert first["settings"]["isolation"] == "worker" and first["platform"]["torch"] == metadata.version("torch")
    assert baseline["platform"] == first["platform"]


def test_a_baseline_written_now_is_the_same_platform_for_the_next_run(torch_runs):
    _, again, baseline = torch_runs
    assert again["platform"] == baseline["platform"]
    assert again["gate"]["same_platform"] and again["gate"]["platform_change"] == ""


def test_a_baseline_from_before_frameworks_were_recorded_is_another_platform(torch_runs):
    """A baseline written when the key held no framework (softaudit's process never imported it) against a run that
    records torch: another platform, named by what changed, where only a worse verdict regresses."""
    _, _, baseline = torch_runs
    old = baseline | {"platform": {k: v for k, v in baseline["platform"].items() if k not in _platform.FRAMEWORKS}}
    comparison = gate.compare(old, baseline)
    assert not comparison.same_platform and not comparison.failed
    assert comparison.platform_change == f"torch None -> {metadata.version('torch')}"


@pytest.mark.parametrize("options", [{"isolation": "none"}, {"workers": 2}], ids=["in-process", "two-workers"])
def test_the_frameworks_are_those_loaded_where_the_candidates_ran(options):
    pytest.importorskip("torch")
    result = softaudit.audit(
        "softaudit.frameworks.torch:softmax",
        kind="softmax",
        dtypes=["float32"],
        suite="quick",
        families=["textbook"],
        **options,
    )
    assert result.frameworks["torch"] == metadata.version("torch")
    assert gate.baseline_of(result)["platform"]["torch"] == metadata.version("torch")


def test_a_numpy_run_records_no_framework_though_softaudits_process_has_one(tmp_path):
    """torch imported by the caller (another test, the user's script) is no part of a run of numpy candidates in
    a worker: its key is the one the committed reports/baseline.json has, which CI machines without torch meet."""
    pytest.importorskip("torch")
    assert "torch" in sys.modules
    result = softaudit.audit("softaudit.candidates.softmax:naive", dtypes=["float32"], suite="quick")
    write_reports(result, tmp_path, ["json"])
    key = json.loads((tmp_path / "results.json").read_text())["platform"]
    committed = json.loads((ROOT / "reports" / "baseline.json").read_text())["platform"]
    assert set(key) == set(committed) == {"machine", "python", "numpy_simd", "blas", "numpy", "ml_dtypes"}
    assert key == gate.baseline_of(result)["platform"] == json.loads(json.dumps(platform_key({})))
    assert result.frameworks == {}


def test_the_gpu_is_named_once_its_framework_has_started_it(monkeypatch):
    """A CPU candidate's process on a GPU machine starts no CUDA context just to name the GPU."""
    started = []
    cuda = types.SimpleNamespace(
        is_initialized=lambda: bool(started),
        get_device_name=lambda: "NVIDIA H100" if started else pytest.fail("named before CUDA was started"),
    )
    fake = types.SimpleNamespace(
        cuda=cuda,
        version=types.SimpleNamespace(cuda="13.0"),
        backends=types.SimpleNamespace(cudnn=types.SimpleNamespace(version=lambda: 91900)),
    )
    monkeypatch.setitem(sys.modules, "torch", fake)
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert _platform.accelerator() == {}
    started.append(True)
    assert _platform.accelerator() == {"gpu": "NVIDIA H100", "cuda": "13.0", "cudnn": 91900}
