"""Time said before it is spent: after a run's first timed steps, one log line with its pace, its precision and how long
the rest takes — the remaining steps, then the end-of-training choices of λ and α (their dev sentences at the model's
measured encoding pace). tqdm's ETA counts the steps alone."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

PACE_SAMPLE = 64  # dev sentences encoded once to time the model's encoding


def duration(seconds: float) -> str:
    """``seconds`` as people say it: ``"40 s"``, ``"12 min"``, ``"1.5 h"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 90 * 60 else f"{seconds / 3600:.1f} h"


class JobEstimateCallback(TrainerCallback):
    """Times steps ``warmup_steps`` + 1 … ``warmup_steps + timed_steps`` and then logs the estimate (module docstring);
    ``choice_sentences``: the distinct dev sentences the end-of-training choices will encode (``None``: no choices),
    ``encode``: encodes a list of sentences with the model as it is then."""

    def __init__(
        self,
        choice_sentences: Callable[[], list[str]] | None,
        encode: Callable[[list[str]], object],
        warmup_steps: int = 5,
        timed_steps: int = 15,
    ):
        self.choice_sentences, self.encode = choice_sentences, encode
        self.warmup_steps, self.timed_steps = warmup_steps, timed_steps
        self.started: float | None = None
        self.estimate: dict[str, float] | None = None  # what was said, for the run's results

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.warmup_steps:
            self.started = time.perf_counter()
        elif self.started is not None and state.global_step == self.warmup_steps + self.timed_steps:
            per_step = (time.perf_counter() - self.started) / self.timed_steps
            remaining = max(state.max_steps - state.global_step, 0)
            precision = "bf16 autocast" if args.bf16 else "fp16 autocast" if args.fp16 else "fp32"
            self.estimate = {"seconds_per_step": per_step, "remaining_training_seconds": remaining * per_step}
            said = f"{per_step:.2f} s a step ({precision}): the remaining {remaining} steps take about "
            said += duration(remaining * per_step)
            if self.choice_sentences is not None and args.should_log:
                sentences = self.choice_sentences()
                started = time.perf_counter()
                self.encode(sentences[:PACE_SAMPLE])
                per_sentence = (time.perf_counter() - started) / max(min(len(sentences), PACE_SAMPLE), 1)
                self.estimate["choice_seconds"] = len(sentences) * per_sentence
                said += f", then the choices of λ and α encode {len(sentences):,} dev sentences: about "
                said += duration(self.estimate["choice_seconds"])
            logger.info("time: %s", said)
        return control
