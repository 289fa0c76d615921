"""Units on worker processes and on a Dask cluster give the serial run's table, row for row and bit for bit: crashes,
time limits and NaN everywhere included; GPU candidates go only to workers with a GPU resource (a resource a test
declares: there is no GPU here); interruption keeps finished rows; without Dask, --scheduler says how to get it."""

import os
import signal
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import softaudit
from softaudit import Candidate
from softaudit.cli import main
from softaudit.execute import NOT_AGAIN
from softaudit.execute import _pool
from softaudit.execute._pool import task
from softaudit.hunt import hunt

from ..execute.test_wiring import REPORTS, rows, start_run, wait_for
from ..test_hunt import BROKEN

KERNELS = Path(__file__).with_name("kernels.py").resolve()
FAULTY = [f"{KERNELS}:{name}" for name in ("sound", "crashes_on_short_rows", "hangs_on_long_rows", "nan_everywhere")]
OPTIONS = {
    "dtypes": ["float32", "bfloat16"],
    "suite": "quick",
    "families": ["textbook", "gaussian", "offset"],
    "timeout": 1,
    "cache_dir": "off",
}


def same(a, b) -> None:
    """Two audits' results are the same: the table (but the seconds) in the same order, the worst inputs, the
    per-case records."""
    assert a.table.drop(columns="seconds").equals(b.table.drop(columns="seconds"))
    assert list(a.worst) == list(b.worst)
    assert [w.as_json() for w in a.worst.values()] == [w.as_json() for w in b.worst.values()]
    assert a.cases.equals(b.cases)


@pytest.fixture(scope="module")
def serial():
    return softaudit.audit(FAULTY + ["softaudit.candidates.softmax:naive"], **OPTIONS)


def test_the_serial_run_shows_every_rule_the_workers_must_keep(serial):
    """(What the other tests compare against has what they must keep: a crash's cause, "not called again" after a
    time limit, NaN everywhere, verdicts.)"""
    by = {name.rsplit(":", 1)[-1]: t for name, t in serial.table.groupby("candidate")}
    crashes, hangs = by["crashes_on_short_rows"], by["hangs_on_long_rows"]
    assert list(crashes[crashes.family == "textbook"].note) == ["killed by SIGSEGV"] * 2
    assert list(hangs[hangs.dtype == "float32"].note) == ["", "no answer in 1 s: killed", NOT_AGAIN]
    assert set(by["nan_everywhere"].note) == {"returned NaN everywhere"}
    sound = by["sound"]
    assert (sound[sound.dtype == "float32"].verdict == "pass").all() and (by["softmax.naive"].verdict == "fail").any()


def test_two_worker_processes_give_the_serial_table(serial):
    same(softaudit.audit(FAULTY + ["softaudit.candidates.softmax:naive"], workers=2, **OPTIONS), serial)


def test_isolation_none_on_workers_gives_the_same_table_for_sound_candidates(serial):
    here = softaudit.audit(f"{KERNELS}:sound", isolation="none", **OPTIONS)
    isolated = serial.table[serial.table.candidate.str.endswith(":sound")].reset_index(drop=True)
    # (alone, its counts are integer columns; beside error rows, where they are NaN, float ones)
    pd.testing.assert_frame_equal(
        here.table.drop(columns="seconds"), isolated.drop(columns="seconds"), check_dtype=False
    )
    same(softaudit.audit(f"{KERNELS}:sound", isolation="none", workers=2, **OPTIONS), here)


@pytest.fixture(scope="module")
def cluster():
    """A Dask cluster of two worker processes on this machine, which may start processes (isolation's)."""
    dask, distributed = pytest.importorskip("dask"), pytest.importorskip("distributed")
    with (
        dask.config.set({"distributed.worker.daemon": False}),
        distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as found,
    ):
        yield found


def test_a_dask_cluster_of_two_workers_gives_the_serial_table(serial, cluster):
    same(
        softaudit.audit(
            FAULTY + ["softaudit.candidates.softmax:naive"], scheduler=cluster.scheduler_address, **OPTIONS
        ),
        serial,
    )


@pytest.mark.parametrize("isolation", ["worker", "none"])
def test_the_frameworks_the_dask_workers_loaded_are_the_runs(cluster, isolation):
    """SciPy loaded on the cluster's workers (or their isolated children), not in softaudit's process, is in the
    result and so in the platform key."""
    pytest.importorskip("scipy")
    result = softaudit.audit(
        "softaudit.frameworks.scipy:softmax",
        kind="softmax",
        scheduler=cluster.scheduler_address,
        isolation=isolation,
        **(OPTIONS | {"dtypes": ["float32"], "families": ["textbook"]}),
    )
    assert (result.table.verdict == "pass").all() and result.frameworks == {"scipy": metadata.version("scipy")}


def test_gpu_candidates_go_only_to_workers_with_a_gpu_resource(tmp_path, monkeypatch):
    dask, distributed = pytest.importorskip("dask"), pytest.importorskip("distributed")
    where = tmp_path / "where"
    monkeypatch.setenv("SOFTAUDIT_TEST_WHERE", str(where))  # (the workers start after this: they see it)
    workers = {
        "cpu": {"cls": distributed.Nanny, "options": {"nthreads": 1}},
        "gpu": {"cls": distributed.Nanny, "options": {"nthreads": 1, "resources": {"GPU": 1}}},
    }
    scheduler = {"cls": distributed.Scheduler, "options": {"dashboard_address": ":0"}}
    with (
        dask.config.set({"distributed.worker.daemon": False}),
        distributed.SpecCluster(workers, scheduler) as both,
        distributed.Client(both) as client,
    ):
        pids = client.run(os.getpid)
        info = client.scheduler_info(n_workers=-1)["workers"]
        gpu = [pids[a] for a, w in info.items() if w["resources"].get("GPU")]
        result = softaudit.audit([f"{KERNELS}:marked_for_a_gpu", f"{KERNELS}:sound"], scheduler=client, **OPTIONS)
    assert set(result.table.verdict) <= {"pass", "warn"} and len(result.table) == 12
    ran_on = set(where.read_text().split())
    assert len(gpu) == 1 and ran_on == {str(gpu[0])}  # every call, on the one worker with the resource


def test_gpu_candidates_without_a_gpu_worker_are_one_line(cluster, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(
        main,
        [
            "run",
            f"{KERNELS}:marked_for_a_gpu",
            "--scheduler",
            cluster.scheduler_address,
            "--suite",
            "quick",
            "--dtype",
            "float32",
        ],
    )
    assert r.exit_code == 2 and "no Dask worker declares a GPU" in r.output and "--resources GPU=1" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_a_default_dask_cluster_daemonic_workers_gives_the_serial_table_crashes_isolated(serial):
    """Workers as Dask's docs start them (`dask worker` under a nanny: daemonic processes, which multiprocessing
    refuses children) run isolated calls: a candidate's SIGSEGV is its error row, and the worker lives on."""
    dask, distributed = pytest.importorskip("dask"), pytest.importorskip("distributed")
    with dask.config.set({"distributed.worker.daemon": True}):  # (Dask's default: the fixture's cluster sets False)
        daemonic = distributed.LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0")
    with daemonic, distributed.Client(daemonic) as client:
        assert all(client.run(lambda: __import__("multiprocessing").current_process().daemon).values())
        pids = set(client.run(os.getpid).values())
        result = softaudit.audit(FAULTY + ["softaudit.candidates.softmax:naive"], scheduler=client, **OPTIONS)
        assert set(client.run(os.getpid).values()) == pids  # no worker died: the crashes were in their children
    same(result, serial)


def test_without_dask_scheduler_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "distributed", None)  # (import distributed now raises ImportError)
    r = CliRunner().invoke(main, ["run", f"{KERNELS}:sound", "--scheduler", "tcp://127.0.0.1:8786"])
    assert r.exit_code == 2
    assert r.output.strip() == "Error: --scheduler needs Dask: pip install 'softaudit[dask]'"
    r = CliRunner().invoke(
        main,
        [
            "run",
            f"{KERNELS}:sound",
            "--workers",
            "2",
            "--suite",
            "quick",
            "--dtype",
            "float32",
            "--family",
            "textbook",
            "--out",
            "out",
        ],
    )
    assert r.exit_code == 0, r.output  # (worker processes need no Dask)


def test_bad_workers_are_a_usage_error(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    for bad in ("0", "all", "Auto"):
        r = CliRunner().invoke(main, ["run", f"{KERNELS}:sound", "--workers", bad])
        assert r.exit_code == 2 and f"must be an integer > 0 or auto, got {bad}" in r.output
    (tmp_path / "pyproject.toml").write_text("[tool.softaudit]\nworkers = 1.5\n")
    r = CliRunner().invoke(main, ["run", f"{KERNELS}:sound"])
    assert r.exit_code == 2 and "workers must be an integer > 0 or auto" in r.output
    with pytest.raises(ValueError, match="workers must be a whole number > 0 or auto, got 'every'"):
        softaudit.audit(f"{KERNELS}:sound", workers="every", **OPTIONS)


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_auto_workers_are_the_cores_this_process_may_use(monkeypatch, cores):
    """`workers = "auto"`, the project's main job's setting: one worker per usable core, softaudit's process on one."""
    monkeypatch.setattr(_pool, "usable_cores", lambda: cores)
    with _pool.pool("auto") as where:
        assert where.width == cores and where.parallel == (cores > 1)


def test_usable_cores_follow_the_affinity_a_container_sets():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    assert _pool.usable_cores() == len(os.sched_getaffinity(0)) >= 1
    one = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", "from softaudit.execute import _pool; print(_pool.usable_cores())"],
        capture_output=True,
        text=True,
    )
    if one.returncode != 0:
        pytest.skip(f"taskset did not run: {one.stderr.strip()[-200:]}")
    assert one.stdout.strip() == "1"


def test_auto_workers_from_the_config_give_the_table_of_one_process(monkeypatch, tmp_path):
    """The config's "auto" reaches the run (two cores here), and its table is `--workers 1`'s, text for text."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(_pool, "usable_cores", lambda: 2)
    widths = []
    real = _pool.pool

    def spy(*args, **kw):
        where = real(*args, **kw)
        widths.append(where.width)
        return where

    monkeypatch.setattr("softaudit.execute.pool", spy)
    (tmp_path / "pyproject.toml").write_text('[tool.softaudit]\nworkers = "auto"\n')
    families = [a for f in OPTIONS["families"] for a in ("--family", f)]
    dtypes = [a for d in OPTIONS["dtypes"] for a in ("--dtype", d)]
    common = [*FAULTY[:2], *families, *dtypes, "--suite", "quick", "--cache-dir", "off", "-q", "--format", "csv"]
    tables = []
    for out, extra in (("auto", []), ("one", ["--workers", "1"])):
        r = CliRunner().invoke(main, ["run", *common, "--out", out, *extra])
        assert r.exit_code in (0, 1), r.output
        tables.append(pd.read_csv(tmp_path / out / "results.csv", dtype=str, keep_default_na=False))
    assert widths == [2, 1]
    assert tables[0].drop(columns="seconds").equals(tables[1].drop(columns="seconds"))
