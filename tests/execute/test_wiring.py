"""Isolation wired into `softaudit run` and `softaudit.audit()`: a candidate that crashes, exits, hangs or floods
its output is an error row with its cause, the other rows are intact, every report is written; Ctrl-C and SIGTERM
keep the finished rows and exit 130; the caller's timers are left alone."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

import softaudit
from softaudit.cli import main
from softaudit.execute import NOT_AGAIN

FAULTY = Path(__file__).with_name("faulty.py").resolve()
ROOT = Path(__file__).resolve().parents[2]
QUICK = ["--suite", "quick", "--dtype", "float32", "--family", "textbook", "--family", "gaussian"]
REPORTS = ("results.csv", "worst.csv", "results.json", "summary.md", "junit.xml", "report.html")
CAUSES = {
    "segfault": "killed by SIGSEGV",
    "aborts": "killed by SIGABRT",
    "exits_0": "called sys.exit(0)",
    "exits_3": "called sys.exit(3)",
    "blocks_alarm": "no answer in 1 s: killed",
    "allocates": "ran out of memory (past the worker's memory limit of 1024 MiB)",
}


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def rows(folder: Path) -> pd.DataFrame:
    table = pd.read_csv(folder / "results.csv", keep_default_na=False)
    table["name"] = table.candidate.str.rsplit(":", n=1).str[-1]
    return table


def test_faults_are_error_rows_with_their_cause_and_the_run_goes_on(project):
    names = ["sound", *CAUSES, "prints"]
    targets = [f"{FAULTY}:{name}" for name in names]
    r = CliRunner().invoke(main, ["run", *targets, *QUICK, "--timeout", "1", "--memory-limit", "1024", "--out", "out"])
    assert r.exit_code == 1, r.output  # an error row fails the run; sys.exit(0) in a candidate is no exit 0
    assert "xxxxxxxx" not in r.output and len(r.output) < 20_000  # the candidate's megabytes went nowhere
    for name in REPORTS:
        assert (project / "out" / name).is_file(), name
    table = rows(project / "out")
    assert sorted(set(table.name)) == sorted(names)
    by = {name: t for name, t in table.groupby("name")}
    assert (by["sound"].verdict == "pass").all() and (by["prints"].verdict == "pass").all()
    assert len(by["sound"]) == 2 and all(len(t) == 2 for t in by.values())  # every family has its row
    for name, cause in CAUSES.items():
        assert (by[name].verdict == "error").all(), name
        notes = list(by[name].note)
        if name == "blocks_alarm":  # killed once, then not called again in that dtype
            assert notes == [cause, NOT_AGAIN], notes
        else:
            assert notes == [cause, cause], (name, notes)
    summary = (project / "out" / "summary.md").read_text()
    assert "killed by SIGSEGV" in summary and "Interrupted" not in summary


def test_isolation_none_calls_candidates_in_this_process(project):
    (project / "pid.py").write_text(
        textwrap.dedent("""
        import os
        import numpy as np
        import softaudit

        @softaudit.candidate(kind="softmax")
        def pid(x, axis=-1):
            with open("pids", "a") as f:
                f.write(f"{os.getpid()}\\n")
            e = np.exp(x - x.max(axis=axis, keepdims=True))
            return e / e.sum(axis=axis, keepdims=True)
    """)
    )
    for isolation, here in (("none", True), ("worker", False)):
        Path("pids").unlink(missing_ok=True)
        r = CliRunner().invoke(main, ["run", "pid.py", *QUICK, "--isolation", isolation, "--out", isolation])
        assert r.exit_code == 0, r.output
        pids = set(Path("pids").read_text().split())
        assert (pids == {str(os.getpid())}) == here, (isolation, pids)
        assert json.loads((project / isolation / "results.json").read_text())["settings"]["isolation"] == isolation


@pytest.mark.parametrize(
    "text, message",
    [
        ("isolation = 'thread'", "[tool.softaudit] isolation must be one of worker, none, got 'thread'"),
        ("memory_limit = 0", "[tool.softaudit] memory_limit must be an integer > 0, got 0"),
    ],
)
def test_a_bad_isolation_setting_is_a_configuration_error(project, text, message):
    (project / "pyproject.toml").write_text(f"[tool.softaudit]\n{text}\n")
    r = CliRunner().invoke(main, ["run", f"{FAULTY}:sound", *QUICK])
    assert r.exit_code == 2 and message in r.output, r.output
    r = CliRunner().invoke(main, ["run", f"{FAULTY}:sound", *QUICK, "--isolation", "thread"])
    assert r.exit_code == 2 and "'thread' is not one of 'worker', 'none'" in r.output


def test_audit_leaves_the_callers_timer_and_handler_alone():
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda *_: fired.append(1))
    signal.setitimer(signal.ITIMER_REAL, 1000.0)
    try:
        targets = [f"{FAULTY}:sound", f"{FAULTY}:spins"]
        table = softaudit.audit(targets, dtypes=["float32"], suite="quick", families=["textbook"], timeout=0.5).table
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        handler = signal.getsignal(signal.SIGALRM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert list(table.verdict) == ["pass", "error"] and table.note[1] == "no answer in 0.5 s: killed"
    assert 900 < left < 1000 and not fired and getattr(handler, "__name__", "") == "<lambda>"


# --- Interruption: the first Ctrl-C or SIGTERM keeps the finished rows; a second stops the units running too. ---

SLOW = """
import os, time
import numpy as np
import softaudit

def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)

@softaudit.candidate(kind="softmax")
def first(x, axis=-1):
    return _softmax(x, axis)

@softaudit.candidate(kind="softmax")
def slow(x, axis=-1):
    open("started", "w").close()  # (the test signals once this exists: the first candidate's rows are done)
    time.sleep(SECONDS)
    return _softmax(x, axis)
"""


def start_run(folder: Path, seconds: float, *args, group: bool = False) -> subprocess.Popen:
    (folder / "slow.py").write_text(SLOW.replace("SECONDS", str(seconds)))
    command = ["run", "slow.py", "--suite", "quick", "--dtype", "float32", "--out", "out", *args]
    return start_softaudit(folder, *command, group=group)


def start_softaudit(folder: Path, *args, group: bool = False) -> subprocess.Popen:
    """`python -m softaudit ARGS` in folder, on this checkout, its output (stdout and stderr) piped; with group, in
    a process group of its own (with its workers), as CI and containers start a job."""
    env = os.environ | {"PYTHONPATH": str(ROOT), "CI": "1"}
    command = [sys.executable, "-m", "softaudit", *args]
    return subprocess.Popen(
        command,
        cwd=folder,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=group,
    )


def stop_twice(process: subprocess.Popen, seconds: float) -> tuple[str, float]:
    """Ctrl-C, and Ctrl-C again 0.5 s later (past Interruption.REPEAT: a second request); the run's output and the
    seconds from the second signal to its exit, which must come within `seconds`."""
    process.send_signal(signal.SIGINT)
    time.sleep(0.5)
    start = time.monotonic()
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=seconds)
    return output, time.monotonic() - start


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the run never reached the slow candidate"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_keeps_the_finished_rows_writes_the_reports_marked_interrupted_and_exits_130(tmp_path, sig):
    process = start_run(tmp_path, 0.2)
    wait_for(tmp_path / "started", process)
    process.send_signal(sig)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    for name in REPORTS:
        assert (tmp_path / "out" / name).is_file(), name
    table = rows(tmp_path / "out")
    first, slow = table[table.name == "first"], table[table.name == "slow"]
    assert len(first) > 1 and (first.verdict == "pass").all()  # every family of the candidate that finished
    assert len(slow) < len(first)  # the other stopped between families
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["settings"]["interrupted"] is True
    assert "Interrupted" in (tmp_path / "out" / "summary.md").read_text()
    assert "Interrupted" in (tmp_path / "out" / "report.html").read_text()
    assert "Aborted" not in output and "Traceback" not in output


def test_a_sigterm_to_the_whole_process_group_is_one_stop_not_a_dead_worker(tmp_path):
    """CI's cancel and a container's stop signal every process of the job, the isolated worker too, and GNU timeout
    signals the job and then its group: one stop arriving twice, microseconds apart."""
    process = start_run(tmp_path, 0.2, group=True)  # (its unit, about 60 calls, finishes)
    wait_for(tmp_path / "started", process)
    os.killpg(process.pid, signal.SIGTERM)
    os.killpg(process.pid, signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 130, output
    assert "stopped at once" not in output  # the repeat within Interruption.REPEAT is the same request
    table = rows(tmp_path / "out")
    assert set(table.verdict) == {"pass"}, table[["name", "family", "verdict", "note"]]  # no "killed by SIGTERM"
    assert json.loads((tmp_path / "out" / "results.json").read_text())["settings"]["interrupted"] is True


def test_a_second_signal_stops_the_call_running_and_still_writes_the_finished_rows(tmp_path):
    """The second Ctrl-C abandons the unit in flight (a call of 60 s: its worker killed) and keeps what finished: a
    run wrapped in GNU timeout, whose one stop ended in "Interrupted again", lost 490 s of rows when a second meant
    "write nothing"."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.md").write_text("an earlier run's\n")
    process = start_run(tmp_path, 60)
    wait_for(tmp_path / "started", process)
    output, seconds = stop_twice(process, 30)
    assert process.returncode == 130 and seconds < 10, output
    assert "the units running are stopped" in output and "stopped at once" not in output
    table = rows(tmp_path / "out")
    first, slow = table[table.name == "first"], table[table.name == "slow"]
    assert len(first) > 1 and (first.verdict == "pass").all()
    assert slow.empty  # (its one unit was abandoned: no row for a call that never returned)
    assert json.loads((tmp_path / "out" / "results.json").read_text())["settings"]["interrupted"] is True
    assert "Interrupted" in (tmp_path / "out" / "summary.md").read_text()
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no staging folder left


def test_the_signals_count_stop_then_abandon_then_quit(monkeypatch):
    """Interruption's answers in order, the handler called as the main thread would (no signal sent): the first
    stops; a repeat within REPEAT is the same stop; a second while auditing abandons the units running (said, then
    KeyboardInterrupt, which the audit takes); a third, or a second after the audit, quits (KeyboardInterrupt)."""
    from softaudit._signals import Interruption

    now = [100.0]
    monkeypatch.setattr("softaudit._signals.time.monotonic", lambda: now[0])
    said = []
    it = Interruption(said.append)
    with it.auditing():
        it._handle(signal.SIGINT, None)
        assert it.stop.is_set() and said == [
            "SIGINT: stopping; the units running finish, the finished rows are written (again to stop now)"
        ]
        now[0] += Interruption.REPEAT / 2
        it._handle(signal.SIGINT, None)  # (the same stop, delivered twice)
        assert len(said) == 1
        now[0] += Interruption.REPEAT
        with pytest.raises(KeyboardInterrupt):
            it._handle(signal.SIGTERM, None)
        assert said[1].startswith("SIGTERM again: the units running are stopped")
        with pytest.raises(KeyboardInterrupt):
            it._handle(signal.SIGINT, None)
        assert len(said) == 2  # (the third says nothing here: the command line says it quit)
    after = Interruption(said.append)
    after._handle(signal.SIGINT, None)
    now[0] += 1
    with pytest.raises(KeyboardInterrupt):
        after._handle(signal.SIGINT, None)  # (the audit is over: nothing runs that a second could stop)
    assert len(said) == 3


def test_a_keyboard_interrupt_once_stopped_keeps_the_finished_units_in_process():
    """audit(stop=...) as the command line calls it: a KeyboardInterrupt raised after the stop (its second Ctrl-C)
    inside a unit returns the units finished before it; without a stop asked first it is the caller's, raised."""
    import threading

    import numpy as np

    stop, calls, last = threading.Event(), [], [None]

    @softaudit.candidate(kind="softmax", name="interrupted")
    def interrupted(x, axis=-1):
        calls.append(1)
        if len(calls) == last[0]:
            stop.set()
            raise KeyboardInterrupt
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    def run(families, **given):
        calls.clear()
        return softaudit.audit(
            interrupted, dtypes=["float32"], suite="quick", families=families, isolation="none", cache=False, **given
        )

    first = len(run(["textbook"]).table) and len(calls)  # (the calls of the first family's unit)
    last[0] = first + 1  # (interrupted in the second family's unit)
    result = run(["textbook", "gaussian"], stop=stop)
    assert result.interrupted and set(result.table.family) == {"textbook"}, result.table[["family", "verdict"]]
    assert (result.table.verdict == "pass").all()
    stop.clear()
    with pytest.raises(KeyboardInterrupt):
        run(["textbook", "gaussian"])


def test_an_interrupted_run_is_not_gated_and_writes_no_baseline(project):
    """In process (--isolation none), a candidate that interrupts its own run on its first call."""
    once = "if not os.path.exists('sent'):\n        open('sent', 'w').close()\n        os.kill(os.getpid(), 2)"
    (project / "k.py").write_text(SLOW.replace("SECONDS", "0").replace('open("started", "w").close()', once))
    args = ["run", "k.py", "--suite", "quick", "--dtype", "float32", "--out", "out", "--isolation", "none"]
    r = CliRunner().invoke(main, [*args, "--update-baseline"])
    assert r.exit_code == 130, r.output
    assert "Warning: the run was interrupted: the baseline out/baseline.json was not written" in r.output
    assert not (project / "out" / "baseline.json").exists()
    (project / "b.json").write_text(json.dumps({"rows": {}}))
    Path("sent").unlink()
    r = CliRunner().invoke(main, [*args, "--baseline", "b.json"])
    assert r.exit_code == 130 and "not compared with the baseline" in r.output and "regression" not in r.output
    assert json.loads((project / "out" / "results.json").read_text())["settings"]["interrupted"] is True


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_the_hunt_at_once_with_130_and_its_worker_closed(tmp_path, sig):
    """`softaudit hunt` has no half-done work to keep: Ctrl-C or SIGTERM quits at once with exit 130 (not click's
    "Aborted!" and 1, the code for a failure found, nor SIGTERM's death that left the worker process running)."""
    (tmp_path / "slow.py").write_text(
        SLOW.replace("SECONDS", "60")
        .replace('open("started", "w").close()', 'pathlib.Path("started").write_text(str(os.getpid()))')
        .replace("import os, time", "import os, pathlib, time")
    )
    process = start_hunt(tmp_path, "slow.py:slow", "--budget", "60")
    wait_for(tmp_path / "started", process)
    time.sleep(0.2)  # (the file exists before its text: let the worker finish writing its pid)
    worker = int((tmp_path / "started").read_text())
    process.send_signal(sig)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 130, output
    assert "Interrupted: the hunt stopped at once" in output and "Aborted" not in output and "Traceback" not in output
    deadline = time.monotonic() + 10
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(worker), "the hunt's worker process outlived it"


def test_an_interrupted_hunt_writes_the_tables_of_the_searches_that_finished(tmp_path):
    """Ctrl-C keeps finished work: `first`'s search (a second of the budget) is done when `slow` is signalled."""
    (tmp_path / "slow.py").write_text(SLOW.replace("SECONDS", "60"))
    process = start_hunt(tmp_path, "slow.py", "--dtype", "float32", "--budget", "2")
    wait_for(tmp_path / "started", process)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=30)
    assert process.returncode == 130, output
    assert "its tables in out hold the 1 search that finished" in output, output
    rows = (tmp_path / "out" / "hunt.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith("slow:first,float32,"), rows
    assert "Interrupted" in (tmp_path / "out" / "hunt.md").read_text()


def start_hunt(folder: Path, *args) -> subprocess.Popen:
    """`softaudit hunt ARGS` in folder (out/, corpus/), a call's time limit past any test's wait."""
    return start_softaudit(folder, "hunt", *args, "--timeout", "100", "--out", "out", "--corpus", "corpus")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # (a zombie waiting for its parent has ended too)
        return f.read().split(")")[1].split()[0] != "Z"
