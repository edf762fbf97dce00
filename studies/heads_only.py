"""Train only the μ/σ² heads of a GaussCSE model on a frozen backbone's cached pooled vectors (the study's recipe).

With the backbone frozen, the pooled vector v of a sentence is the same at every step of every run. Computing it
once per distinct sentence (:class:`studies.frozen_features.BackboneFeatures`) and training the heads on the cache is
the frozen-backbone recipe (``train_gausscse.py --freeze_backbone``) without a backbone forward pass per step: a
run takes seconds instead of many minutes on a CPU, which is what makes a many-seed ablation feasible there
(``studies/study.py``). The loss is the same module (``gausscse.training.losses``), with the same masks, and the
batch is laid out as the trainer's (``gausscse.training.batch``).

Differences from ``train_gausscse.py --freeze_backbone``: the backbone runs without dropout (the cached vectors
are computed in eval mode), and the loop is a plain AdamW + linear schedule loop instead of ``Trainer``.

Example:

```python
>>> features = BackboneFeatures.compute(model.encoder, tokenizer, sentences_of(examples), max_length=32)
>>> log = train_heads(model, examples, features, HeadsOnlyArguments(loss="ent+con+rev"))
```
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass

import torch
from transformers import get_linear_schedule_with_warmup

from gausscse.data.sources import EXAMPLE_COLUMNS
from gausscse.training.arguments import GaussCSETrainingArguments
from gausscse.training.batch import split_batch_embeddings, text_batch_layout
from gausscse.training.losses import NLIBatchEmbeddings, build_loss, uses_contradictions
from studies.frozen_features import BackboneFeatures

Example = dict[str, str | None]


TRAINING_DEFAULTS = {field.name: field.default for field in dataclasses.fields(GaussCSETrainingArguments)}


def training_default(name: str):
    """The default of the ``train_gausscse.py`` flag ``name``, read from ``GaussCSETrainingArguments`` (where it is
    set, once)."""
    return TRAINING_DEFAULTS[name]


@dataclass
class HeadsOnlyArguments:
    """The knobs of a heads-only run, named as the ``train_gausscse.py`` flags they mirror and defaulting to them.

    Attributes:
        loss: ``ent``, ``ent+con``, ``ent+rev``, ``ent+con+rev`` or ``simcse`` (``--loss``).
        temperature: τ (``--temperature``).
        batch_size: examples per contrastive batch (``--per_device_train_batch_size``).
        learning_rate: AdamW learning rate of the heads (``--head_learning_rate``; when that is ``None``, the
            single ``--learning_rate``).
        weight_decay: AdamW weight decay (``--weight_decay``).
        num_train_epochs: passes over the examples (``--num_train_epochs``).
        warmup_ratio: linear warm-up over this fraction of the steps, then linear decay to 0 (``--warmup_steps``,
            a ratio of the steps there when < 1).
        eval_steps: evaluate every N steps (and at the end) when an evaluator is given (``--eval_steps``).
        seed: shuffling and head initialisation (``--seed``).
    """

    loss: str = training_default("loss")
    temperature: float = training_default("temperature")
    batch_size: int = training_default("per_device_train_batch_size")
    learning_rate: float = (
        training_default("head_learning_rate")
        if training_default("head_learning_rate") is not None
        else training_default("learning_rate")
    )
    weight_decay: float = training_default("weight_decay")
    num_train_epochs: float = training_default("num_train_epochs")
    warmup_ratio: float = training_default("warmup_steps")
    eval_steps: int = int(training_default("eval_steps"))
    seed: int = training_default("seed")

    def __post_init__(self) -> None:
        for name in ("batch_size", "eval_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        for name in ("learning_rate", "num_train_epochs", "temperature"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")


def sentences_of(examples: Sequence[Example]) -> list[str]:
    """Every sentence of the examples (premises, entailment and present contradiction hypotheses)."""
    return [example[column] for example in examples for column in EXAMPLE_COLUMNS if example[column] is not None]


def shuffled_batches(num_examples: int, batch_size: int, num_steps: int, seed: int) -> Iterator[list[int]]:
    """``num_steps`` batches of example indices: a fresh permutation per epoch (seeded), the last partial batch of
    an epoch kept, as ``Trainer``'s default sampler does."""
    generator = torch.Generator().manual_seed(seed)
    produced = 0
    while True:
        order = torch.randperm(num_examples, generator=generator).tolist()
        for start in range(0, num_examples, batch_size):
            if produced == num_steps:
                return
            produced += 1
            yield order[start : start + batch_size]


def batch_embeddings(
    model, features: BackboneFeatures, examples: Sequence[Example], with_contradictions: bool
) -> NLIBatchEmbeddings:
    """The heads' Gaussians of a batch, laid out by [`gausscse.training.batch.text_batch_layout`] as
    ``TripletCollator``'s one forward pass gives them."""
    layout = text_batch_layout(examples, with_contradictions)
    pooled = features.vectors(layout.sentences, model.config.pooling).to(model.device)
    mu, logvar = model.gaussian_heads(pooled)
    return split_batch_embeddings(mu, logvar, layout.contradiction_index, layout.text_ids)


def train_heads(
    model,
    examples: Sequence[Example],
    features: BackboneFeatures,
    args: HeadsOnlyArguments,
    evaluate: Callable[[object], dict[str, float]] | None = None,
    metric_for_best_model: str = training_default("metric_for_best_model"),
) -> dict:
    """Train ``model.mean_head`` and ``model.logvar_head`` (re-initialised from ``args.seed``) on ``examples``.

    Args:
        model: a GaussCSE model whose ``encoder`` produced ``features`` (it is not touched).
        examples: dicts with ``premise``, ``entailment`` and ``contradiction`` (``None`` when missing).
        features: cached pooled vectors of every sentence of ``examples``.
        args: see :class:`HeadsOnlyArguments`.
        evaluate: ``model -> metrics`` called every ``eval_steps`` steps and at the end; the heads with the
            largest ``metric_for_best_model`` are restored at the end (the paper keeps the best checkpoint).

    Returns:
        ``{"arguments", "steps", "seconds", "log": [{"step", "loss" | metrics...}], "best": {...} | None}``.
    """
    if len(examples) == 0:
        raise ValueError("train_heads: examples is empty")
    started = time.perf_counter()
    torch.manual_seed(args.seed)
    model._init_weights(model.mean_head)
    model._init_weights(model.logvar_head)
    model.encoder.requires_grad_(False)
    parameters = [*model.mean_head.parameters(), *model.logvar_head.parameters()]
    for parameter in parameters:
        parameter.requires_grad_(True)
    optimizer = torch.optim.AdamW(parameters, lr=args.learning_rate, weight_decay=args.weight_decay)
    num_steps = math.ceil(args.num_train_epochs * math.ceil(len(examples) / args.batch_size))
    scheduler = get_linear_schedule_with_warmup(optimizer, round(args.warmup_ratio * num_steps), num_steps)
    loss_fn = build_loss(args.loss, args.temperature, reduction=model.config.similarity_reduction)
    with_contradictions = uses_contradictions(args.loss)
    log, best, best_state = [], None, None

    def evaluate_now(step: int) -> None:
        nonlocal best, best_state
        model.eval()
        metrics = evaluate(model)
        model.train()
        log.append({"step": step, **metrics})
        if metric_for_best_model not in metrics:
            raise KeyError(f"metric_for_best_model {metric_for_best_model!r} not in the evaluator's {sorted(metrics)}")
        if best is None or metrics[metric_for_best_model] > best[metric_for_best_model]:
            best = {"step": step, **metrics}
            best_state = copy.deepcopy((model.mean_head.state_dict(), model.logvar_head.state_dict()))

    model.train()
    running = []
    for step, rows in enumerate(shuffled_batches(len(examples), args.batch_size, num_steps, args.seed), start=1):
        batch = batch_embeddings(model, features, [examples[row] for row in rows], with_contradictions)
        loss = loss_fn(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
        running.append(loss.item())
        if step % args.eval_steps == 0 or step == num_steps:
            log.append({"step": step, "loss": sum(running) / len(running)})
            running = []
            if evaluate is not None:
                evaluate_now(step)
    if best_state is not None:
        model.mean_head.load_state_dict(best_state[0])
        model.logvar_head.load_state_dict(best_state[1])
    model.eval()
    return {
        "arguments": asdict(args),
        "steps": num_steps,
        "seconds": time.perf_counter() - started,
        "log": log,
        "best": best,
    }


__all__ = [
    "HeadsOnlyArguments",
    "batch_embeddings",
    "sentences_of",
    "shuffled_batches",
    "train_heads",
    "training_default",
]
