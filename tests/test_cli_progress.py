"""Progress where a person or a CI log can see it: plain lines at a steady pace off a terminal (done/total, elapsed,
what is left), silenced by -q; the estimate of what is left is the time per unit since the start."""

import time
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from softaudit.cli import _progress, main
from softaudit.cli._progress import Lines, clock, remaining, reporter


def test_what_is_left_is_the_time_per_unit_since_the_start_times_the_units_left():
    assert remaining(30.0, 3, 12) == 90.0  # 10 s a unit, 9 left
    assert remaining(30.0, 12, 12) == 0.0
    assert remaining(30.0, 0, 12) is None  # nothing done: no estimate
    assert remaining(30.0, 3, None) is None


def test_the_clock_reads_hours_minutes_and_seconds():
    assert [clock(s) for s in (0.4, 59.6, 61, 3725, None)] == ["0:00:00", "0:01:00", "0:01:01", "1:02:05", "?"]


def test_a_line_says_done_of_total_elapsed_and_what_is_left():
    now = [100.0]
    lines = Lines(pace=60, now=lambda: now[0])
    with lines:
        now[0] = 110.0
        assert lines.line() == "softaudit: 0:00:10 elapsed, nothing finished yet"
        lines.update(0, 8, "")
        assert lines.line() == "softaudit: 0/8 done, 0:00:10 elapsed, nothing finished yet"
        lines.update(2, 8, "softmax.naive float16")
        now[0] = 130.0  # 30 s for 2 units: 15 s each, 6 left
        assert lines.line() == "softaudit: 2/8 done, 0:00:30 elapsed, about 0:01:30 left (last: softmax.naive float16)"


def test_lines_come_at_a_steady_pace_and_a_last_one_once_any_came(capsys):
    with Lines(pace=0.02) as lines:
        lines.update(1, 4, "a float32")
        time.sleep(0.2)
        lines.update(4, 4, "b float32")
    written = capsys.readouterr().err.splitlines()
    assert len(written) >= 3, written
    assert all(line.startswith("softaudit: ") for line in written)
    assert written[0].startswith("softaudit: 1/4 done, ") and written[-1].startswith("softaudit: 4/4 done in ")
    with Lines(pace=60):  # a run shorter than the pace writes nothing
        pass
    assert capsys.readouterr().err == ""


def test_the_bar_on_a_terminal_estimates_as_the_lines_do():
    bar, _ = reporter(quiet=False, terminal=True)
    left = bar.columns[-1]
    task = SimpleNamespace(elapsed=30.0, completed=3, total=12)
    assert left.render(task).plain == "about 0:01:30 left"
    assert left.render(SimpleNamespace(elapsed=5.0, completed=0, total=None)).plain == ""
    assert reporter(quiet=True, terminal=True)[1] is None


@pytest.mark.parametrize("quiet", [False, True])
def test_a_run_off_a_terminal_prints_progress_lines_unless_quiet(tmp_path, monkeypatch, quiet):
    monkeypatch.setattr(_progress, "PACE", 0.05)
    monkeypatch.chdir(tmp_path)
    args = ["run", "softaudit.candidates.softmax:naive", "--dtype", "float16", "--dtype", "float32"]
    args += ["--suite", "quick", "--family", "textbook", "--family", "gaussian", "--cache-dir", "off"]
    result = CliRunner().invoke(main, args + ["-q"] * quiet)
    assert result.exit_code in (0, 1), result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("softaudit: ")]
    if quiet:
        assert lines == []
        return
    assert lines, result.stderr
    assert lines[-1].startswith("softaudit: 2/2 done in "), lines
