"""``GaussCSETrainer``: a ``transformers.Trainer`` for GaussCSE (and supervised SimCSE) on NLI examples.

* ``compute_loss``: one forward pass over all sentences of the batch (premises, entailment hypotheses, present
  contradiction hypotheses), then the loss of ``gausscse.training.losses`` in fp32;
* ``create_optimizer``: the fresh μ/σ² heads get ``--head_learning_rate``, the backbone ``--learning_rate``;
* ``evaluate``: the metrics of the evaluator the training command passes (SNLI dev; prefixed ``eval_``), which drive the
  best-checkpoint selection.
"""

from __future__ import annotations

from typing import Any

import torch
from accelerate.utils import broadcast_object_list
from torch import nn
from transformers import Trainer

from .batch import split_batch_embeddings
from .losses import build_loss

HEAD_PREFIXES = ("mean_head.", "logvar_head.")


def is_head_parameter(name: str) -> bool:
    """Whether a parameter name (of the unwrapped GaussCSE model) belongs to the μ or σ² head."""
    return name.startswith(HEAD_PREFIXES)


class GaussCSETrainer(Trainer):
    """Trainer for GaussCSE models on batches from [`training.data.TripletCollator`].

    Args:
        evaluator: a callable ``(model, tokenizer) -> dict[str, float]`` such as
            the evaluator the training command passes (SNLI dev); ``None`` turns evaluation off.
        All other arguments are ``Trainer``'s; ``args`` is a ``GaussCSETrainingArguments``.
    """

    def __init__(self, *args, evaluator=None, **kwargs):
        if evaluator is not None:
            # Trainer insists on an eval_dataset when evaluating; the evaluator holds its own data.
            kwargs.setdefault("eval_dataset", [evaluator])
        super().__init__(*args, **kwargs)
        self.evaluator = evaluator
        self.loss_fn = build_loss(
            self.args.loss,
            temperature=self.args.temperature,
            reduction=self.accelerator.unwrap_model(self.model).config.similarity_reduction,
            simcse_weight=self.args.simcse_weight,
        )
        # The loss is a per-batch mean: let Trainer divide it by the gradient accumulation steps.
        self.model_accepts_loss_kwargs = False

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        inputs = dict(inputs)
        contradiction_index = inputs.pop("contradiction_index")
        text_ids = inputs.pop("text_ids", None)
        outputs = model(**inputs)
        batch = split_batch_embeddings(outputs.mu, outputs.logvar, contradiction_index, text_ids)
        loss = self.loss_fn(batch)
        return (loss, outputs) if return_outputs else loss

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """AdamW (or ``--optim``) with four groups: {heads, backbone} × {weight decay, none}; the heads use
        ``--head_learning_rate`` (``None``: ``--learning_rate``)."""
        if self.optimizer is not None:
            return self.optimizer
        model = self.model if model is None else model
        decay = set(self.get_decay_parameter_names(model))
        head_lr = self.args.head_learning_rate if self.args.head_learning_rate is not None else self.args.learning_rate
        groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                groups.setdefault((is_head_parameter(name), name in decay), []).append(parameter)
        parameter_groups = [
            {
                "params": parameters,
                "lr": head_lr if is_head else self.args.learning_rate,
                "weight_decay": self.args.weight_decay if decays else 0.0,
            }
            for (is_head, decays), parameters in sorted(groups.items())
        ]
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        self.optimizer = optimizer_cls(parameter_groups, **optimizer_kwargs)
        return self.optimizer

    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """Run the evaluator on the main process (others get its result), log and return ``{prefix}_{name}``."""
        if self.evaluator is None:
            return {}
        payload = [None]
        if self.accelerator.is_main_process:
            model = self.accelerator.unwrap_model(self.model)
            payload = [self.evaluator(model, self.processing_class)]
        if self.accelerator.num_processes > 1:
            broadcast_object_list(payload)
        metrics = {f"{metric_key_prefix}_{name}": float(value) for name, value in payload[0].items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics


__all__ = ["GaussCSETrainer", "is_head_parameter", "split_batch_embeddings"]
