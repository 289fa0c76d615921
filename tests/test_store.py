"""Prepared families kept on disk between processes: exact round trips, read-only maps, invalidation, pruning."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import softaudit
from softaudit import _store, prepare

from .test_runner import good

OPTIONS = {"kind": "softmax", "dtypes": ["bfloat16"], "suite": "quick", "families": ["gaussian", "ties"]}


def test_arrays_come_back_bit_for_bit_read_only_and_mapped(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 50))
    obj = {
        "f64": x,
        "bf16": x.astype(ml_dtypes.bfloat16),
        "bool": x > 0,
        "int8": np.arange(7, dtype=np.int8),
        "strided": x[:, ::3],
        "scalar": np.float32(2.5),
        "nested": [x.T, None, "text"],
    }
    _store.save(tmp_path / "a.pkl", obj)
    back = _store.load(tmp_path / "a.pkl")
    for name in ("f64", "bf16", "bool", "int8", "strided"):
        assert back[name].dtype == obj[name].dtype
        assert back[name].tobytes() == obj[name].tobytes()
    assert back["scalar"] == np.float32(2.5) and back["nested"][1:] == [None, "text"]
    assert np.array_equal(back["nested"][0], x.T)
    assert not back["f64"].flags.writeable and not back["f64"].flags.owndata  # a view of the mapped file
    assert back["f64"].ctypes.data % _store.ALIGN == 0


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_a_damaged_file_is_computed_afresh_and_removed(tmp_path, damage):
    path = tmp_path / "a.pkl"
    _store.save(path, {"x": np.arange(1000.0)})
    data = path.read_bytes()
    path.write_bytes({"truncate": data[: len(data) - 100], "garbage": b"x" * 500, "empty": b""}[damage])
    assert _store.load(path) is None and not path.exists()
    assert _store.load(tmp_path / "missing.pkl") is None


def test_a_new_process_reuses_the_references_and_gives_the_same_table(tmp_path, counted_references):
    first = softaudit.audit(good, cache_dir=tmp_path, **OPTIONS).table
    computed = len(counted_references)
    assert computed > 0
    assert sorted(p.name.split("-", 1)[1] for p in tmp_path.iterdir()) == [
        "gaussian-softmax-bfloat16-quick-0.pkl",
        "ties-softmax-bfloat16-quick-0.pkl",
    ]
    prepare.clear_cache()  # as a new process would start
    second = softaudit.audit(good, cache_dir=tmp_path, **OPTIONS).table
    assert len(counted_references) == computed  # nothing computed again
    assert first.drop(columns="seconds").equals(second.drop(columns="seconds"))
    prepare.clear_cache()
    softaudit.audit(good, cache_dir=tmp_path, **OPTIONS | {"seed": 1})  # other cases: other files
    assert len(counted_references) > computed and len(list(tmp_path.iterdir())) == 4


def test_other_code_does_not_read_the_files(tmp_path, counted_references, monkeypatch):
    softaudit.audit(good, cache_dir=tmp_path, **OPTIONS)
    computed = len(counted_references)
    prepare.clear_cache()
    monkeypatch.setattr(_store, "fingerprint", lambda: "0ther")
    softaudit.audit(good, cache_dir=tmp_path, **OPTIONS)
    assert len(counted_references) == 2 * computed


def test_a_cache_written_as_another_cpu_is_not_read(tmp_path):
    # numpy's SIMD targets and OpenBLAS's kernels change the comparisons' bits, which a kept family holds: the gate
    # read 633 -> 817 ulp as a regression from a cache warmed as another CPU (issue 24). Each profile its own files.
    profile = {"NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Sandybridge"}
    code = "from softaudit import _platform, _store; print(_platform.cpu()); print(_store.fingerprint())"
    prints = [
        subprocess.run([sys.executable, "-c", code], env=os.environ | env, capture_output=True, text=True, check=True)
        for env in ({}, profile)
    ]
    (native_cpu, native), (other_cpu, other) = (p.stdout.split("\n")[:2] for p in prints)
    if native_cpu == other_cpu:
        pytest.skip(f"this CPU computes as the other profile does ({native_cpu})")
    assert native and other and native != other


def test_off_and_cache_false_write_nothing(tmp_path, counted_references, monkeypatch):
    softaudit.audit(good, cache_dir="off", **OPTIONS)
    softaudit.audit(good, cache=False, cache_dir=tmp_path, **OPTIONS)
    monkeypatch.setenv("SOFTAUDIT_CACHE_DIR", "off")
    assert _store.folder() is None
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv("SOFTAUDIT_CACHE_DIR", str(tmp_path / "here"))
    assert _store.folder() == tmp_path / "here"
    monkeypatch.delenv("SOFTAUDIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert _store.folder() == tmp_path / "xdg" / "softaudit"


def test_the_least_recently_used_files_go_past_the_limit(tmp_path, monkeypatch):
    for i, name in enumerate(["old", "mid", "new"]):
        _store.save(tmp_path / f"{name}.pkl", np.zeros(10_000))
        os.utime(tmp_path / f"{name}.pkl", (1000 + i, 1000 + i))
    _store.load(tmp_path / "old.pkl")  # used now: the most recent
    monkeypatch.setattr(_store, "MAX_BYTES", 100_000)  # one of the 80 kB files stays
    _store.save(tmp_path / "newest.pkl", np.zeros(10))
    _store.prune(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["newest.pkl", "old.pkl"]


def test_a_folder_that_cannot_be_written_warns_and_the_audit_goes_on(tmp_path, counted_references):
    blocked = tmp_path / "a_file"  # (a file where the folder should be: refused even to root)
    blocked.write_text("")
    with pytest.warns(UserWarning, match="cannot keep prepared cases") as caught:
        table = softaudit.audit(good, cache_dir=blocked, **OPTIONS).table
    assert (table.verdict == "pass").all() and len(table) == 2
    assert len(caught) == 1  # said once, not tried again for the second family


def test_the_command_line_keeps_families_in_the_folder_it_is_given(tmp_path):
    """Twice with the folder (the second run reads what the first kept), once with --cache-dir off (nothing kept
    anywhere): the same verdict, exit code and table each time."""
    import pandas as pd

    env = os.environ | {"SOFTAUDIT_CACHE_DIR": str(tmp_path / "cache")}
    command = [
        sys.executable,
        "-c",
        "from softaudit.cli import main; main()",
        "run",
        "softaudit.candidates.softmax:naive",
        "--dtype",
        "float32",
        "--suite",
        "quick",
        "--family",
        "gaussian",
        "-q",
    ]
    runs = [(env, []), (env, []), (env | {"SOFTAUDIT_CACHE_DIR": str(tmp_path / "other")}, ["--cache-dir", "off"])]
    tables = []
    for i, (run_env, extra) in enumerate(runs):
        out = tmp_path / f"out{i}"
        done = subprocess.run(
            [*command, "--out", str(out), *extra], env=run_env, capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 1, done.stderr  # naive softmax overflows on the gaussian family: a fail
        assert done.stdout.startswith("FAIL  softmax.naive float32 (gaussian): ") and not done.stderr
        tables.append(pd.read_csv(out / "results.csv").drop(columns="seconds"))
        if i == 0:
            kept = [p.name.split("-", 1)[1] for p in (tmp_path / "cache").iterdir()]
            assert kept == ["gaussian-softmax-float32-quick-0.pkl"]
    assert list(tables[0].verdict) == ["fail"]
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    assert len(list((tmp_path / "cache").iterdir())) == 1 and not (tmp_path / "other").exists()


def test_pruning_passes_over_a_file_another_process_moves_meanwhile(tmp_path, monkeypatch):
    """Worker processes write families into one folder at once: a temporary file listed by one may be renamed
    into place by another before it is looked at."""
    _store.save(tmp_path / "kept.pkl", np.zeros(10))
    (tmp_path / ".tmp-moving").write_bytes(b"x")
    listed = os.scandir

    def listing_then_moved(folder):
        entries = list(listed(folder))
        (tmp_path / ".tmp-moving").unlink()
        return iter(entries)

    monkeypatch.setattr(os, "scandir", listing_then_moved)
    _store.prune(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["kept.pkl"]
