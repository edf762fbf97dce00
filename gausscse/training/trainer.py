"""``GaussCSETrainer``: a ``transformers.Trainer`` for the losses of ``training.losses``, with its own head learning
rate, the dev evaluator's metrics, ``elapsed_seconds`` in every log entry and non-finite values stopping the run."""

from __future__ import annotations

import copy
import logging
import re
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import broadcast_object_list
from peft import PeftModel
from torch import nn
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from gausscse.io import write_json
from gausscse.loading import CHECKPOINT_COMPLETE
from gausscse.model.adapters_gausscse import base_record, write_adapter_extras

from .batch import split_batch_embeddings
from .frozen_cache import GIB, FrozenStateCache, default_cache_bytes
from .losses import LossTermArguments, build_loss

logger = logging.getLogger(__name__)
RUN_ARGUMENTS_FILE = "run_arguments.json"  # what fixed the run a checkpoint belongs to (a resume must match)


class NonFiniteError(FloatingPointError):
    """Training produced a NaN/inf loss, gradient or weight: the run stops before such weights are saved."""


def first_non_finite(named_tensors) -> str | None:
    """The name of the first tensor that holds NaN or inf, else ``None``; one read-back from the device, not one per
    tensor (it runs on every training step)."""
    named = [(name, tensor) for name, tensor in named_tensors if tensor is not None]
    finite = torch.stack([torch.isfinite(tensor).all() for _, tensor in named]).tolist() if named else []
    return next((name for (name, _), ok in zip(named, finite, strict=True) if not ok), None)


def check_finite_weights(model: nn.Module, what: str) -> None:
    """``NonFiniteError`` naming ``what`` and the first non-finite parameter of ``model``."""
    name = first_non_finite(model.named_parameters())
    if name is not None:
        raise NonFiniteError(f"{what}: parameter {name} holds NaN or inf values; nothing was saved")


def frozen_state_cache(model: nn.Module, gib: float | None) -> FrozenStateCache | None:
    """The cache of ``model``'s frozen part (``--frozen_cache_gb``; ``None``: [`default_cache_bytes`]), or ``None``
    where it has none below a trained layer (``GaussCSEModel.cached_from``) or the flag is 0."""
    cached_from = getattr(model, "cached_from", None)  # a PeftModel has none: its adapters sit in every layer
    if gib == 0 or cached_from is None or cached_from() is None:
        return None
    return FrozenStateCache(default_cache_bytes() if gib is None else int(gib * GIB))


def is_head_parameter(name: str) -> bool:
    """Whether a parameter name (of a GaussCSE model, or of its ``PeftModel``) belongs to the μ or σ² head."""
    return re.search(r"(^|\.)(mean_head|logvar_head)\.", name) is not None


class CheckpointCallback(TrainerCallback):
    """Before a step's checkpoint is saved: refuse non-finite weights. After Trainer saved ``checkpoint-N``: add what
    an adapter checkpoint lacks for the readers (the sentence-transformers files, the code and the base's record,
    hashed once a run; not peft's card, which names a local path), the run arguments (``RUN_ARGUMENTS_FILE``, for the
    resume check) and, last, the completeness marker."""

    def __init__(self, trainer: GaussCSETrainer):
        self.trainer = trainer
        self.base_record: dict | None = None

    def on_step_end(self, args, state, control, **kwargs):
        if control.should_save:  # set for this step by Trainer's flow callback, which runs first
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            check_finite_weights(model, f"checkpoint at step {state.global_step}")
        return control

    def on_save(self, args, state, control, **kwargs):
        trainer = self.trainer
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        model = trainer.accelerator.unwrap_model(trainer.model)
        if args.should_save and folder.is_dir():
            if isinstance(model, PeftModel):
                self.base_record = add_adapter_extras(folder, model, self.base_record)
            if trainer.run_arguments is not None:
                write_json(folder / RUN_ARGUMENTS_FILE, trainer.run_arguments)
            write_json(folder / CHECKPOINT_COMPLETE, {"global_step": state.global_step})
        return control


def add_adapter_extras(folder: Path, model: PeftModel, record: dict | None = None) -> dict | None:
    """What an adapter folder that Trainer saved lacks for the readers: the sentence-transformers files, the shipped
    code and the base's record (``record``, else hashed here; returned); peft's placeholder card goes."""
    (folder / "README.md").unlink(missing_ok=True)
    record = record or base_record(model.peft_config["default"].base_model_name_or_path)
    write_adapter_extras(folder, record, model.get_base_model().config)
    return record


class GaussCSETrainer(Trainer):
    """Trainer for GaussCSE models on batches of [`gausscse.training.batch.TripletCollator`]; ``args``: a
    ``GaussCSETrainingArguments``; ``evaluator``: ``(model, tokenizer) -> dict[str, float]`` (``None``: no
    evaluation); ``run_arguments``: written into every checkpoint (``RUN_ARGUMENTS_FILE``) for the resume check."""

    def __init__(self, *args, evaluator=None, run_arguments: dict[str, Any] | None = None, **kwargs):
        self.run_arguments = run_arguments
        self.train_started: float | None = None
        if evaluator is not None:  # Trainer insists on an eval_dataset; the evaluator holds its own data
            kwargs.setdefault("eval_dataset", [evaluator])
        super().__init__(*args, **kwargs)
        self.add_callback(CheckpointCallback(self))
        self.evaluator = evaluator
        unwrapped = self.accelerator.unwrap_model(self.model)
        config = unwrapped.config
        terms = {item.name: getattr(self.args, item.name) for item in fields(LossTermArguments)}
        reduction, frozen_mean = config.similarity_reduction, config.frozen_mean
        self.loss_fn = build_loss(self.args.loss, self.args.temperature, reduction, frozen_mean=frozen_mean, **terms)
        self.model_accepts_loss_kwargs = False  # a per-batch mean: Trainer divides it by the accumulation steps
        self.frozen_cache = frozen_state_cache(unwrapped, self.args.frozen_cache_gb)
        self.keep_teacher = None
        if self.args.keep_weight > 0:  # a frozen copy of the starting encoder gives the keep term its targets
            if config.frozen_mean:
                raise ValueError("--keep_weight with a frozen_mean model: its μ is frozen already, nothing to keep")
            self.keep_teacher = copy.deepcopy(unwrapped.encoder).eval().requires_grad_(False)

    def compute_loss(
        self,
        model: nn.Module,
        inputs: dict[str, torch.Tensor],
        return_outputs: bool = False,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> torch.Tensor | tuple[torch.Tensor, Any]:
        inputs = dict(inputs)
        contradiction_index, text_ids = inputs.pop("contradiction_index"), inputs.pop("text_ids", None)
        frozen = {}
        if self.frozen_cache is not None and model.training:  # the frozen layers' states of sentences seen before
            frozen = self.frozen_cache.inputs_for(self.accelerator.unwrap_model(model), inputs)
        outputs = model(**inputs, **frozen)
        batch = split_batch_embeddings(outputs.mu, outputs.logvar, contradiction_index, text_ids)
        if self.keep_teacher is not None:  # its vector of each sentence, pooled as the model pools
            encoder_inputs = {name: value for name, value in inputs.items() if name != "sentence_index"}
            with torch.no_grad():
                hidden = self.keep_teacher(**encoder_inputs, return_dict=True).last_hidden_state
                pool = self.accelerator.unwrap_model(model).pool
                batch.teacher = pool(hidden, inputs.get("attention_mask"), inputs.get("sentence_index"))
        loss = self.loss_fn(batch)
        return (loss, outputs) if return_outputs else loss

    def training_step(
        self, model: nn.Module, inputs: dict[str, Any], num_items_in_batch: torch.Tensor | int | None = None
    ) -> torch.Tensor:
        """Trainer's step, then stop at the first non-finite loss or gradient, naming the step."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        step = self.state.global_step + 1
        advice = "lower --learning_rate / --head_learning_rate, or check the data of this step"
        if not bool(torch.isfinite(loss).all()):
            raise NonFiniteError(f"step {step}: the loss is {float(loss)}; {advice}")
        name = first_non_finite((name, parameter.grad) for name, parameter in model.named_parameters())
        if name is not None:
            raise NonFiniteError(f"step {step}: the gradient of {name} holds NaN or inf values; {advice}")
        return loss

    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        """``--optim`` (AdamW) over {heads, backbone} × {weight decay, none}; the heads at ``--head_learning_rate``
        (``None``: ``--learning_rate``)."""
        if self.optimizer is not None:
            return self.optimizer
        model, args = self.model if model is None else model, self.args
        decay = set(self.get_decay_parameter_names(model))
        head_rate = args.learning_rate if args.head_learning_rate is None else args.head_learning_rate
        rates = {True: head_rate, False: args.learning_rate}  # by is_head
        groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
        for name, parameter in model.named_parameters():
            if parameter.requires_grad:
                groups.setdefault((is_head_parameter(name), name in decay), []).append(parameter)
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(args, model)
        self.optimizer = optimizer_cls(
            [
                {"params": parameters, "lr": rates[is_head], "weight_decay": args.weight_decay if decays else 0.0}
                for (is_head, decays), parameters in sorted(groups.items())
            ],
            **optimizer_kwargs,
        )
        return self.optimizer

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self.train_started = time.perf_counter()
        output = super().train(*args, **kwargs)
        if self.frozen_cache is not None:
            logger.info("frozen-state cache: %s", self.frozen_cache.summary())
        return output

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """Trainer's ``log``, with the seconds since ``train`` began in this process as ``elapsed_seconds``."""
        if self.train_started is not None:
            logs = {**logs, "elapsed_seconds": round(time.perf_counter() - self.train_started, 2)}
        super().log(logs, start_time)

    def evaluate(
        self, eval_dataset: Any = None, ignore_keys: list[str] | None = None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        """Run the evaluator on the main process (the others get its result); log and return ``{prefix}_{name}``."""
        if self.evaluator is None:
            return {}
        payload = [None]
        if self.accelerator.is_main_process:
            payload = [self.evaluator(self.accelerator.unwrap_model(self.model), self.processing_class)]
        if self.accelerator.num_processes > 1:
            broadcast_object_list(payload)
        metrics = {f"{metric_key_prefix}_{name}": float(value) for name, value in payload[0].items()}
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics
