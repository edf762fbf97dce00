"""The run's time said before it is spent (``JobEstimateCallback``): the pace of the timed steps, the remaining steps
at that pace and the end-of-training choices at the model's measured encoding pace; logged by a real run."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from gausscse.cli import train as train_gausscse
from gausscse.training import progress
from gausscse.training.progress import JobEstimateCallback, duration

from ..helpers import train_args


def test_durations_read_as_people_say_them():
    assert [duration(seconds) for seconds in (0.4, 89, 90, 3000, 5399, 5400, 9000)] == [
        "0 s", "89 s", "2 min", "50 min", "90 min", "1.5 h", "2.5 h",
    ]  # fmt: skip


def test_the_estimate_is_the_timed_pace_times_what_is_left(monkeypatch, caplog):
    clock = iter([100.0, 130.0, 200.0, 202.0])  # steps 5 → 20 take 30 s; 64 sentences encode in 2 s
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    encoded: list[list[str]] = []
    sentences = [f"sentence {row}" for row in range(6400)]
    callback = JobEstimateCallback(lambda: sentences, encoded.append, warmup_steps=5, timed_steps=15)
    args = SimpleNamespace(bf16=True, fp16=False, should_log=True)
    with caplog.at_level(logging.INFO, logger="gausscse.training.progress"):
        for step in range(1, 25):
            callback.on_step_end(args, SimpleNamespace(global_step=step, max_steps=1600), None)
    assert encoded == [sentences[:64]]  # the pace from one sample, once
    assert callback.estimate == pytest.approx(
        {"seconds_per_step": 2.0, "remaining_training_seconds": 1580 * 2.0, "choice_seconds": 6400 * 2.0 / 64}
    )
    assert caplog.messages == [
        "time: 2.00 s a step (bf16 autocast): the remaining 1580 steps take about 53 min, then the choices of λ and α "
        "encode 6,400 dev sentences: about 3 min"
    ]


def test_a_run_says_its_time_after_its_first_steps(backbone, data_dir, tmp_path, caplog):
    flags = ("--max_steps", "24", "--save_strategy", "no", "--eval_strategy", "steps", "--eval_steps", "24",
             "--load_best_model_at_end", "false",
             "--logging_steps", "24")  # fmt: skip
    with caplog.at_level(logging.INFO, logger="gausscse.training.progress"):
        train_gausscse.main(train_args(backbone, data_dir, tmp_path / "run", *flags))
    said = [message for message in caplog.messages if message.startswith("time: ")]
    assert len(said) == 1
    assert "the remaining 4 steps take about" in said[0] and "dev sentences: about" in said[0]
