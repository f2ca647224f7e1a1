"""empriv.infra.progress: a log line every tenth or every 30 s (whichever first) off a terminal, a tqdm bar on one; and
the long loops (pre-training, DP training, scoring, ACR, the canary audit) report through it."""

from __future__ import annotations

import logging
import math
import os
import re
import sys

import pytest

from empriv.infra.progress import LogProgress, on_terminal, progress


class Clock:
    """A clock the test moves by hand (seconds)."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog, name: str = "empriv.progress") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name]


def test_a_line_every_tenth_when_steps_are_fast(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="empriv.progress"):
        bar = LogProgress(total=50, desc="pre-train base", clock=clock)
        for _ in range(50):
            clock.now += 0.5  # 25 s in all: the 30 s rule never fires
            bar.update(1)
        bar.close()
    got = lines(caplog)
    assert [re.match(r"pre-train base: (\d+)/50 steps", s).group(1) for s in got] == \
        ["5", "10", "15", "20", "25", "30", "35", "40", "45", "50"]
    assert got[0] == "pre-train base: 5/50 steps (10%), 2.5 s elapsed, ~22.5 s left"
    assert got[-1] == "pre-train base: 50/50 steps (100%), 25.0 s elapsed (done)"


def test_a_line_every_30_seconds_when_steps_are_slow(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="empriv.progress"):
        bar = LogProgress(total=1000, desc="train eps8", clock=clock)
        for _ in range(10):
            clock.now += 11.0  # a tenth is 100 steps away: only the time rule fires, at 33, 66 and 99 s
            bar.update(1)
    got = lines(caplog)
    assert [int(re.match(r"train eps8: (\d+)/1000", s).group(1)) for s in got] == [3, 6, 9]
    assert got[0] == "train eps8: 3/1000 steps (0%), 33.0 s elapsed, ~10967.0 s left"


def test_whichever_comes_first_and_jumps_over_several_tenths_give_one_line(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="empriv.progress"):
        bar = LogProgress(total=100, desc="d", clock=clock)
        clock.now += 1
        bar.update(35)  # 35 %: one line, not three
        clock.now += 29
        bar.update(1)  # 36 %, 29 s after the last line: nothing
        clock.now += 1
        bar.update(1)  # 37 %, 30 s after: the time rule
        clock.now += 1
        bar.update(3)  # 40 %: the next tenth
        bar.update(59)  # 99 %: a tenth (90 %) crossed
        bar.update(1)  # 100 %: left to close
        bar.close()
        bar.close()  # closing twice writes one final line
    got = [re.match(r"d: (\d+)/100", s).group(1) for s in lines(caplog)]
    assert got == ["35", "37", "40", "99", "100"]


def test_without_a_total_only_the_time_rule_and_a_final_line(caplog):
    clock = Clock()
    with caplog.at_level(logging.INFO, logger="empriv.progress"):
        with LogProgress(desc="ACR secret-03", clock=clock) as bar:
            for _ in range(7):
                clock.now += 10
                bar.update(1)
    assert lines(caplog) == ["ACR secret-03: 3 steps, 30.0 s elapsed", "ACR secret-03: 6 steps, 60.0 s elapsed",
                             "ACR secret-03: 7 steps, 70.0 s elapsed (done)"]


def test_iterating_yields_every_item_logs_no_item_and_says_when_stopped_early(caplog):
    items = ["Rita Mcconnell 713-345-6593", "second secret text", "third"]
    with caplog.at_level(logging.INFO, logger="empriv.progress"):
        assert list(progress(items, desc="score", unit="secrets", tty=False)) == items
        for i, _ in enumerate(progress(items, desc="partial", unit="secrets", tty=False)):
            if i == 1:
                break
    got = lines(caplog)
    assert got[-1].startswith("partial: 1/3 secrets (33%)") and got[-1].endswith("(stopped)")
    assert any(s.startswith("score: 3/3 secrets (100%)") and s.endswith("(done)") for s in got)
    assert not any("Mcconnell" in s or "second secret" in s for s in got)


def test_bad_settings_fail_with_one_line():
    with pytest.raises(ValueError, match="progress total must be >= 0, got -1"):
        LogProgress(total=-1)
    with pytest.raises(ValueError, match=r"progress every_fraction must be in \(0, 1\], got 0"):
        LogProgress(total=3, every_fraction=0)
    with pytest.raises(ValueError, match="progress every_seconds must be > 0, got 0"):
        LogProgress(total=3, every_seconds=0)
    with pytest.raises(TypeError, match="no iterable"):
        list(LogProgress(total=3))


def test_tty_choice_bars_on_a_terminal_lines_elsewhere(monkeypatch, tmp_path):
    from tqdm import tqdm

    master, slave = os.openpty()
    with os.fdopen(slave, "w") as terminal, open(tmp_path / "log.txt", "w") as plain:
        assert on_terminal(terminal) and not on_terminal(plain)
        monkeypatch.setattr(sys, "stderr", terminal)
        bar = progress(range(3), desc="x")
        assert isinstance(bar, tqdm)
        assert list(bar) == [0, 1, 2]
        monkeypatch.setattr(sys, "stderr", plain)
        assert isinstance(progress(range(3), desc="x"), LogProgress)
        # an explicit choice wins over the stream
        assert isinstance(progress(range(3), tty=True), tqdm) and isinstance(progress(range(3), tty=False), LogProgress)
        monkeypatch.undo()
    os.close(master)


# --------------------------------------------------------------------------- the long loops report (off a terminal)
def test_dp_training_reports_every_tenth_of_its_steps(caplog):
    import torch

    from tiny_models import tiny_gpt2

    from empriv.config import RunConfig, parse_params
    from empriv.models.adapters import prepare_for_finetuning
    from empriv.models.lm import encode_fixed
    from empriv.train.dp import dp_finetune

    params = parse_params({"data": {"n_train": 100}, "train": {"micro_batch_size": 16},
                           "cube": {"epsilon": [8], "batch_size": [8], "steps": [20], "learning_rate": [0.01], "seed": [0]}})
    g = torch.Generator().manual_seed(0)
    ids, mask = encode_fixed([torch.randint(0, 299, (10,), generator=g).tolist() for _ in range(100)], 299, 16)
    run = RunConfig(8.0, 8, 20, 0.01, 0)
    with caplog.at_level(logging.INFO, logger="empriv.train"):
        dp_finetune(prepare_for_finetuning(tiny_gpt2(), "full"), ids, mask, run=run, noise_multiplier=1.0,
                    params=params, device=torch.device("cpu"))
    got = lines(caplog, "empriv.train")
    progress_lines = [s for s in got if s.startswith(f"train {run.name}: ")]
    assert [int(re.search(r": (\d+)/20 steps", s).group(1)) for s in progress_lines] == [2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert progress_lines[-1].endswith("(done)")


def test_pretraining_reports(caplog):
    import torch

    from tiny_models import tiny_gpt2

    from empriv.config import BaseParams
    from empriv.models.lm import encode_fixed
    from empriv.models.registry import pretrain

    g = torch.Generator().manual_seed(0)
    ids, mask = encode_fixed([torch.randint(0, 299, (10,), generator=g).tolist() for _ in range(40)], 299, 16)
    base = BaseParams(pretrain_steps=10, pretrain_batch_size=4)
    with caplog.at_level(logging.INFO, logger="empriv.models"):
        losses = pretrain(tiny_gpt2(), ids, mask, base, torch.device("cpu"))
    assert len(losses) == 10 and all(math.isfinite(x) for x in losses)
    got = [s for s in lines(caplog, "empriv.models") if s.startswith("pre-train base: ")]
    assert [int(re.search(r": (\d+)/10 steps", s).group(1)) for s in got] == list(range(1, 11))


def test_canary_audit_reports_canaries_scored(caplog):
    from tiny_models import tiny_gpt2

    from empriv.audit.canary_audit import audit_canaries
    from empriv.secrets.canaries import Canary, CanarySet

    canaries = [Canary(f"c{i:04d}", (10 + i, 11 + i), (200 + i,), bool(i % 2)) for i in range(20)]
    canaries += [Canary(f"p{i:04d}", (50 + i, 51 + i), (250 + i,), None) for i in range(5)]
    cs = CanarySet(canaries, design="random", prefix="random", loss="sft", base_vocab_size=300)
    with caplog.at_level(logging.INFO, logger="empriv.audit"):
        metrics, rows = audit_canaries(tiny_gpt2(), tiny_gpt2(seed=1), cs, eos_id=299, seq_len=16, delta=1e-5,
                                       guesses=10, batch_size=4)
    assert len(rows) == 20 and metrics["audit_n_canaries"] == 20
    got = [s for s in lines(caplog, "empriv.audit") if s.startswith("audit: scoring canaries: ")]
    counts = [int(re.search(r": (\d+)/50 canaries", s).group(1)) for s in got]
    assert counts[-1] == 50 and got[-1].endswith("(done)") and counts == sorted(counts) and len(counts) >= 5
