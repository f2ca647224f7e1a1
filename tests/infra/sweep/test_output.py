"""empriv.infra.sweep.output: the sweep's ETA estimator on hand-made job times, its progress off a terminal (a line per
tenth of the items or 30 s) and on one (one tqdm bar), its log file, and the stderr tail of a failed job."""

from __future__ import annotations

import re

import pytest

from empriv.infra.sweep.output import SweepOutput, duration_text, eta_seconds, log_tail


class Clock:
    def __init__(self):
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def test_eta_is_the_work_left_at_each_stage_kinds_mean_over_the_slots():
    durations = {"train": [10.0, 20.0], "score": [2.0, 4.0]}  # means 15 and 3; all finished jobs: 9
    waiting = {"train": 4, "score": 6, "analyze": 1}  # analyze: no job of its kind finished yet -> 9
    running = [("train", 5.0), ("score", 10.0)]  # 15 - 5 = 10 left; the score job is past its mean: 0
    assert eta_seconds(durations, waiting, running, slots=2) == pytest.approx((4 * 15 + 6 * 3 + 9 + 10 + 0) / 2)
    assert eta_seconds(durations, waiting, running, slots=1) == pytest.approx(97.0)
    # one long job left cannot use two slots: the ETA is what it still needs
    assert eta_seconds({"train": [100.0]}, {}, [("train", 40.0)], slots=2) == pytest.approx(60.0)
    assert eta_seconds({"train": [100.0]}, {"score": 0}, [], slots=2) == 0.0  # nothing left
    assert eta_seconds({}, {"train": 3}, [("train", 1.0)], slots=2) is None  # nothing measured yet
    with pytest.raises(ValueError, match="slots must be >= 1, got 0"):
        eta_seconds({}, {"train": 1}, [], slots=0)


def test_durations_read_as_seconds_minutes_hours():
    assert [duration_text(s) for s in (0.4, 42, 250, 3600 + 5 * 60 + 59)] == ["0 s", "42 s", "4 min 10 s", "1 h 05 min"]


def test_off_a_terminal_a_line_per_tenth_of_the_items(tmp_path):
    clock, printed = Clock(), []
    out = SweepOutput(printed.append, tty=False, clock=clock)
    out.open_log(tmp_path / "sweep.log")
    out.start(48)
    for done in range(1, 49):  # an item every 2 s, updated at every 0.1 s poll as the sweep does
        for _ in range(20):
            clock.now += 0.1
            out.update(done - 1, 2, 0, 2.0 * (48 - done + 1) / 2)
        out.update(done, 2, 0, 2.0 * (48 - done) / 2)
    out.close()
    assert len(printed) == out.lines == 10  # 9 tenths (items 5, 10, 15, 20, 24, 29, 34, 39, 44) and the last
    assert [int(re.match(r"progress: (\d+)/48 items", line).group(1)) for line in printed] == \
        [5, 10, 15, 20, 24, 29, 34, 39, 44, 48]
    assert printed[0] == "progress: 5/48 items (10%), 2 running, 10 s elapsed, ~43 s left"
    assert printed[-1] == "progress: 48/48 items (100%), 1 min 36 s elapsed (done)"
    logged = (tmp_path / "sweep.log").read_text().splitlines()
    assert [line[9:] for line in logged] == printed and all(re.match(r"\d\d:\d\d:\d\d ", x) for x in logged)


def test_off_a_terminal_a_line_every_30_s_while_nothing_finishes():
    clock, printed = Clock(), []
    out = SweepOutput(printed.append, tty=False, clock=clock)
    out.start(4)
    for _ in range(100):  # 100 s, nothing finishes: lines at 30, 60 and 90 s
        clock.now += 1.0
        out.update(0, 2, 0, None)
    out.update(1, 1, 1, 300.0)  # a quarter: a line at once
    out.close()
    assert printed == ["progress: 0/4 items (0%), 2 running, 30 s elapsed, ETA after the first job",
                       "progress: 0/4 items (0%), 2 running, 1 min 00 s elapsed, ETA after the first job",
                       "progress: 0/4 items (0%), 2 running, 1 min 30 s elapsed, ETA after the first job",
                       "progress: 1/4 items (25%), 1 running, 1 failed, 1 min 40 s elapsed, ~5 min 00 s left",
                       "progress: 1/4 items (25%), 1 failed, 1 min 40 s elapsed (stopped)"]


def test_on_a_terminal_one_bar_and_the_lines_printed_above_it(tmp_path, capsys):
    clock, printed = Clock(), []
    out = SweepOutput(printed.append, tty=True, clock=clock)
    out.open_log(tmp_path / "sweep.log")
    out.start(3)
    out.note("submitted train@1: job 1, logs x_0_log.out and .err")  # a per-job line: the log only
    clock.now += 5
    out.update(1, 1, 0, 12.0)
    out.say("retry train@2 (attempt 2 of 2): job 2 failed")
    clock.now += 5
    out.update(3, 0, 0, 0.0)
    out.close()
    assert printed == ["retry train@2 (attempt 2 of 2): job 2 failed"]  # no progress lines: the bar shows it
    bar = capsys.readouterr().err
    assert "sweep:  33%" in bar and "1/3 items" in bar and "ETA ~12 s, 1 running" in bar and "3/3 items" in bar
    log = [line[9:] for line in (tmp_path / "sweep.log").read_text().splitlines()]
    assert log == ["submitted train@1: job 1, logs x_0_log.out and .err",
                   "retry train@2 (attempt 2 of 2): job 2 failed", "progress: 3/3 items (100%), 10 s elapsed (done)"]


def test_the_log_tail_is_what_the_command_wrote_not_submitits_traceback(tmp_path):
    err = tmp_path / "7_0_log.err"
    command = [f"line {i}" for i in range(30)] + ["Traceback (most recent call last):", "ValueError: bad x", ""]
    err.write_text("submitit INFO (2026-11-27 12:00:00,000) - Starting with JobEnvironment(job_id=7)\n"
                   + "\n".join(command) + "\n"
                   "submitit ERROR (2026-11-27 12:00:01,000) - Submitted job triggered an exception\n"
                   "Traceback (most recent call last):\n  File \"sweep.py\", line 1\n"
                   "RuntimeError: train@2: command failed (exit status 1) on attempt 1\n")
    assert log_tail(err) == command[-16:-1]  # the last 15 lines, the trailing blank one dropped
    assert log_tail(err, lines=2) == ["Traceback (most recent call last):", "ValueError: bad x"]
    assert log_tail(tmp_path / "missing.err") == []
