"""Progress where a person or a CI log can see it: plain lines at a steady pace off a terminal (done/total, elapsed,
what is left), silenced by -q; the estimate of what is left is the time per unit of work since the start, each unit
weighed by its cost estimated before it runs (a cold family's preparation on the first candidate that needs it)."""

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


def _planned(kinds: int, candidates: int, families: int):
    """Groups of fake candidates (no declared conventions) on named families, as softaudit.plan makes them."""
    from softaudit.plan import Group, Source

    return [
        Group(
            f"kind{g}",
            None,
            tuple(Source(f"kind{g}", f"family{s}", None) for s in range(families)),
            tuple(SimpleNamespace(name=f"c{c}", conventions=()) for c in range(candidates)),
        )
        for g in range(kinds)
    ]


def test_a_cold_family_weighs_on_the_first_candidate_that_needs_it_and_a_kept_one_does_not():
    from softaudit import runner

    job = SimpleNamespace(suite="quick", seed=0)
    planned = _planned(2, 3, 2)
    kept_family0 = runner.costs(planned, lambda source, fmt, d: source.name == "family0", job)
    assert kept_family0 == {
        (0, 0): 2 + runner.COLD,  # its two families, and family1's preparation
        (0, 1): 2,
        (0, 2): 2,
        (1, 0): 2 + runner.COLD,
        (1, 1): 2,
        (1, 2): 2,
    }
    warm = runner.costs(planned, lambda source, fmt, d: True, job)
    assert set(warm.values()) == {2.0}


def test_weighed_units_estimate_a_cold_run_near_its_truth_where_equal_ones_were_far_off():
    """A simulated cold run, its time independent of the weights: 2 kinds x 5 candidates x 3 families; preparing a
    family takes 5 s, a candidate's calls 1 s a family; the first candidate of a kind waits for its 3 families (18 s),
    the others take 3 s. Told each finished unit on a fake clock, the weighed estimate stays within 20% of the time
    truly left; the equal one starts at 162 s where 42 s are left."""
    from softaudit import runner

    planned = _planned(2, 5, 3)
    weights = runner.costs(planned, lambda source, fmt, d: False, SimpleNamespace(suite="quick", seed=0))
    took = [18.0 if c == 0 else 3.0 for g in range(2) for c in range(5)]
    end = sum(took)
    assert end == 60.0
    now = [0.0]
    weighed, equal = Lines(now=lambda: now[0]), Lines(now=lambda: now[0])
    with weighed, equal:
        spent, whole = 0.0, sum(weights.values())
        worst_weighed, worst_equal = 0.0, 0.0
        for done, (key, seconds) in enumerate(zip(sorted(weights), took), 1):
            now[0] += seconds
            spent += weights[key]
            weighed.weigh(spent, whole)
            for lines in (weighed, equal):
                lines(done, len(took), f"c{key[1]} kind{key[0]}")
            truth = end - now[0]
            if done == 1:
                assert equal.line().endswith("about 0:02:42 left (last: c0 kind0)")  # 18 s a unit, 9 left
            if truth:
                left = remaining(now[0], *weighed.weighed)
                worst_weighed = max(worst_weighed, abs(left - truth) / truth)
                worst_equal = max(worst_equal, abs(remaining(now[0], done, len(took)) - truth) / truth)
    assert worst_weighed < 0.2, worst_weighed
    assert worst_equal > 2.0, worst_equal


def test_the_bar_estimates_by_the_weights_when_told_them():
    bar, update = reporter(quiet=False, terminal=True)
    left = bar.columns[-1]
    update.weigh(20.0, 60.0)
    update(1, 10, "a float32")
    task = bar.tasks[0]
    assert (task.completed, task.total, task.fields["weighed"]) == (1, 10, (20.0, 60.0))
    task = SimpleNamespace(elapsed=30.0, completed=1, total=10, fields={"weighed": (20.0, 60.0)})
    assert left.render(task).plain == "about 0:01:00 left"  # 30 s for 20 of 60: 60 s for the 40 left


def test_an_audit_weighs_a_cold_family_and_a_kept_one_not(tmp_path):
    """The second audit with the same cache folder finds every family kept: its whole is one per family; the first
    carried each family's preparation too."""
    import softaudit
    from softaudit import runner

    class Told:
        def __init__(self):
            self.weighed, self.units = [], []

        def weigh(self, spent, whole):
            self.weighed.append((spent, whole))

        def __call__(self, done, total, label):
            self.units.append((done, total))

    runner.clear_cache()  # (a family another test prepared in this process would read as kept)
    told = []
    for _ in range(2):
        told.append(Told())
        softaudit.audit(
            "softaudit.candidates.softmax:naive",
            dtypes=["float16", "float32"],
            suite="quick",
            families=["textbook", "gaussian"],
            cache_dir=tmp_path,
            progress=told[-1],
        )
    cold, warm = told
    assert cold.units == warm.units == [(1, 2), (2, 2)]
    assert warm.weighed[-1] == (4.0, 4.0)  # 2 families in each of 2 dtypes, all kept
    assert cold.weighed[-1] == (4 + 4 * runner.COLD,) * 2
    assert [spent for spent, _ in cold.weighed] == [2 + 2 * runner.COLD, 4 + 4 * runner.COLD]
