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
from softaudit.execute import NOT_AGAIN, _pool
from softaudit.execute._serial import task
from softaudit.hunt import hunt

from ..execute.test_wiring import REPORTS, rows, start_run, stop_twice, wait_for
from ..test_hunt import BROKEN

KERNELS = Path(__file__).with_name("kernels.py").resolve()
FAULTY = [f"{KERNELS}:{name}" for name in ("sound", "crashes_on_short_rows", "hangs_on_long_rows", "nan_everywhere")]
LANE_HERE = _pool.Local.work  # (softaudit's own lane at work, as the tests of worker processes turn it off)
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


@pytest.fixture(autouse=True)
def pooled_small_plans(on_the_workers):
    """These tests check what worker processes do, on plans small enough to stay in softaudit's process otherwise:
    their units go to the workers (conftest.on_the_workers; tests/execute/test_lanes.py has the plans as they are)."""


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


def test_this_process_and_a_worker_together_give_the_serial_table(serial, monkeypatch):
    """Softaudit's own lane runs units too (as it does once a large plan's worker has started; here at once): the
    crashes, the time limit and "not called again" come out as in the serial run whichever lane ran a unit."""
    monkeypatch.setattr(_pool.Local, "work", LANE_HERE)
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
        [
            "taskset",
            "-c",
            "0",
            sys.executable,
            "-c",
            "from softaudit.execute._pool import usable_cores as u; print(u())",
        ],
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


def test_a_stop_keeps_the_finished_units_of_a_parallel_run(serial):
    stop = threading.Event()
    stopped = softaudit.audit(
        FAULTY + ["softaudit.candidates.softmax:naive"],
        workers=2,
        stop=stop,
        progress=lambda done, total, label: stop.set(),
        **OPTIONS,
    )
    assert stopped.settings["interrupted"] is True
    kept = stopped.table.drop(columns="seconds")
    assert 0 < len(kept) < len(serial.table)
    whole = serial.table.drop(columns="seconds").merge(kept, how="inner")
    assert len(whole) == len(kept)  # every kept row is the serial run's row, whole


def test_ctrl_c_with_workers_keeps_finished_rows_and_exits_130(tmp_path):
    process = start_run(tmp_path, 0.05, "--workers", "2")
    wait_for(tmp_path / "started", process)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    for name in REPORTS:
        assert (tmp_path / "out" / name).is_file(), name
    table = rows(tmp_path / "out")
    assert 0 < len(table) < 2 * 12 and "Traceback" not in output  # (12 families each: not all of them ran)


def test_a_second_ctrl_c_kills_the_workers_and_keeps_the_finished_rows(tmp_path):
    """Two dtypes: 48 units, whose slow calls (60 s) soon make the work queued worth the worker's start: this process
    and the worker each hold one when the first Ctrl-C comes, and the second kills them rather than wait."""
    process = start_run(tmp_path, 60, "--workers", "2", "--dtype", "float16")
    wait_for(tmp_path / "started", process)
    output, seconds = stop_twice(process, 60)
    assert process.returncode == 130 and seconds < 20, output
    table = rows(tmp_path / "out")
    assert set(table.name) == {"first"} and (table.verdict == "pass").all(), output
    assert "Traceback" not in output


def _inner_pid(*, ex) -> int:
    """A task that calls a candidate through its worker's executor: the pid of the process the call ran in."""
    pid = Candidate("softmax", "pid", lambda x, axis=-1: np.full(x.shape, float(os.getpid())))
    return int(ex.call(pid, {"x": np.zeros((1, 2))}, None, (1, 2), np.float64, 60)[0][0, 0])


def _retire_after_each_task() -> None:
    """A loky worker's initializer: it counts as leaking memory after a task or two, so loky retires it."""
    import loky.process_executor

    loky.process_executor._MAX_MEMORY_LEAK_SIZE = -1  # (any growth, none included)
    loky.process_executor._MEMORY_LEAK_CHECK_DELAY = 0.0


@pytest.mark.filterwarnings("ignore:A worker was restarted:UserWarning")  # (it is made to)
def test_a_worker_that_retires_closes_its_isolated_calls_first():
    """loky retires a worker whose memory grew (in an audit, mapped families grow it): on its way out,
    multiprocessing waits for the worker's children, so the isolated calls' own worker must be gone by then (it was
    not: the worker, and with it the whole run, waited forever)."""
    from loky import ProcessPoolExecutor

    workers = ProcessPoolExecutor(max_workers=1, initializer=_retire_after_each_task)
    try:
        pids = [workers.submit(task, _inner_pid, "worker", None).result(timeout=60) for _ in range(4)]
    finally:
        workers.shutdown(wait=False, kill_workers=True)  # (a worker stuck on its way out would block `with`)
    assert len(set(pids)) > 1  # (a retired worker's calls ran in a child of its own)
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


def test_the_hunt_spreads_its_searches_over_workers(tmp_path, monkeypatch, cluster):
    monkeypatch.setenv("CI", "1")
    (tmp_path / "broken.py").write_text(BROKEN)
    findings = hunt(str(tmp_path / "broken.py"), dtypes=["float32"], budget=30, corpus=tmp_path / "corpus", workers=2)
    assert [f.failed for f in findings] == [True, True, True]
    assert len(list((tmp_path / "corpus").rglob("*.json"))) == 3
    on_dask = hunt(
        f"{tmp_path / 'broken.py'}:fill_minus_30",
        dtypes=["float16"],
        budget=10,
        corpus=None,
        scheduler=cluster.scheduler_address,
    )
    assert [f.failed for f in on_dask] == [True]


def test_private_folders_of_killed_audits_are_removed_by_the_next(tmp_path):
    from softaudit.execute._pool import Local

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    abandoned = tmp_path / f".share-{int(dead.stdout)}-x"  # (a process that has exited)
    live = tmp_path / f".share-{os.getpid()}-y"
    for folder in (abandoned, live):
        folder.mkdir()
        (folder / "1.pkl").write_bytes(b"a family")
    mine = Local(2, "worker", None, tmp_path)
    try:
        assert mine.share.parent == tmp_path and mine.share.is_dir()
        assert not abandoned.exists() and live.exists()
    finally:
        mine.close()
    assert not mine.share.exists()


def test_each_family_is_prepared_once_per_dtype_for_all_the_units_on_workers(monkeypatch):
    """The prepared families (inputs, references) are computed once per kind x dtype x family and handed to every
    unit that audits them, not recomputed per unit: five candidates, one preparation each."""
    from softaudit import runner

    submitted = []
    original = runner._prepare_all

    def counting(group, where, job, stopped):
        submitted.extend((source.name, group.fmt.name) for source in group.sources)
        return original(group, where, job, stopped)

    monkeypatch.setattr(runner, "_prepare_all", counting)
    names = ("naive", "max_shifted", "max_shifted_running", "exp2", "max_shifted_f32acc")
    five = [f"softaudit.candidates.softmax:{name}" for name in names]
    result = softaudit.audit(five, workers=2, **(OPTIONS | {"timeout": 30}))
    assert sorted(submitted) == sorted({(f, d) for f in OPTIONS["families"] for d in OPTIONS["dtypes"]})
    assert len(result.table) == 5 * len(submitted)  # every unit audited, each against a family prepared once


def _pids(seen: Path, families: list, workers) -> set:
    """The processes a softmax audit (quick suite, float32, in-process calls) called its candidate in."""
    seen.write_text("")

    def softmax(x, axis=-1):
        with open(seen, "a") as f:
            f.write(f"{os.getpid()}\n")
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    softaudit.audit(
        softmax,
        kind="softmax",
        dtypes=["float32"],
        suite="quick",
        families=families,
        workers=workers,
        isolation="none",
        cache_dir="off",
    )
    return set(map(int, seen.read_text().split()))
