"""The arguments of ``gausscse-train`` (``HfArgumentParser`` dataclasses) with the paper's defaults, except where
SNLI-dev measurements chose otherwise (``--head_learning_rate``, the model's ``similarity_reduction``)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import json
import math
import sys
import textwrap
import types
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
import yaml
from transformers import HfArgumentParser, TrainingArguments
from transformers.utils import is_torch_xla_available

from gausscse.data.sources import SHAPES, TRAIN_SOURCES, parse_column_overrides, parse_repeats
from gausscse.data.tokenize import TRAIN_MAX_LENGTH
from gausscse.model.backbone_gausscse import STARTS
from gausscse.model.configuration_gausscse import HEAD_INITS, MEAN_ACTIVATIONS, POOLINGS, GaussCSEConfig
from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH
from gausscse.model.gaussian import REDUCTIONS

from .losses import LOSS_NAMES, LossTermArguments, check_loss_name, check_terms

# A field's metadata key: the flag fixes what a run trains, so a resumed run must keep it (not: how long it trains,
# when it saves, evaluates or logs, where, with how many workers).
FIXES_RUN = "fixes_run"
# transformers' own TrainingArguments fields that fix a run (the ones not declared again below)
TRAINER_FIXED_FLAGS = ("gradient_accumulation_steps", "lr_scheduler_type", "seed", "bf16")


def arg(default: Any, help: str, fixes_run: bool = False) -> Any:
    """A dataclass field with its ``--help`` text, marked ``FIXES_RUN`` when ``fixes_run``."""
    return field(default=default, metadata={"help": help, FIXES_RUN: True} if fixes_run else {"help": help})


@dataclass
class ModelArguments:
    """The backbone, the Gaussian heads and LoRA. The ``GaussCSEConfig`` fields default to ``None``: a new model takes
    the config's defaults, a GaussCSE folder being continued keeps its own (a value contradicting it is an error)."""

    model_name_or_path: str = arg(
        "bert-base-uncased",
        "Encoder to start from (Hub id or local folder), or a GaussCSE folder to continue training.",
        fixes_run=True,
    )
    pooling: str | None = arg(None, f"Sentence vector: one of {POOLINGS} (default: as --start sets it).")
    mean_activation: str | None = arg(None, f"μ head activation, one of {MEAN_ACTIVATIONS} (default: per --start).")
    start: str = arg(
        "auto",
        f"How a new model starts, one of {STARTS}: 'backbone' keeps the backbone's sentence embedding as μ (frozen "
        "μ path); 'paper' = [CLS], tanh, random heads; 'auto' = 'backbone' for a sentence-transformers model.",
        fixes_run=True,
    )
    normalize_mean: bool | None = arg(None, "L2-normalise μ (see GaussCSEConfig).")
    head_init: str | None = arg(None, f"Fresh heads, one of {HEAD_INITS} (see GaussCSEConfig).")
    frozen_mean: bool | None = arg(None, "μ from a frozen copy of the backbone, log σ² from the trained one.")
    variance_layers: int | None = arg(None, "One trunk: log σ² from a trained copy of the encoder's top k layers.")
    mean_layers: int | None = arg(
        None,
        "One trunk with --frozen_mean false: μ learns through the encoder's top k layers, the rest stays frozen "
        "(unset: the whole encoder learns).",
    )
    similarity_reduction: str | None = arg(None, f"The similarity, one of {REDUCTIONS} (default: GaussCSEConfig's).")
    freeze_backbone: bool = arg(False, "Train only the μ/σ² heads.", fixes_run=True)
    lora_r: int = arg(0, "LoRA rank on the trained encoder (peft); 0 trains the backbone fully.", fixes_run=True)
    lora_alpha: float = arg(16.0, "LoRA alpha.", fixes_run=True)
    lora_dropout: float = arg(0.1, "LoRA dropout.", fixes_run=True)
    lora_target_modules: list[str] | None = arg(None, "Modules that get adapters (default: peft's).", fixes_run=True)
    merge_lora: bool = arg(False, "Save the adapters merged (else a PEFT adapter folder on a GaussCSE base model).")
    trust_remote_code: bool = arg(False, "Run the Python code a backbone ships (its config's auto_map): read it first.")

    def __post_init__(self) -> None:
        if self.start not in STARTS:
            raise ValueError(f"--start must be one of {STARTS}, got {self.start!r}")
        if self.lora_r < 0:
            raise ValueError(f"lora_r must be >= 0, got {self.lora_r}")
        if self.freeze_backbone and self.lora_r > 0:
            raise ValueError("--freeze_backbone and --lora_r are exclusive")
        if self.merge_lora and self.lora_r == 0:
            raise ValueError("--merge_lora needs LoRA: set --lora_r to a positive rank")


@dataclass
class DataArguments:
    """Where the NLI training data and the SNLI dev set come from."""

    data_dir: str | None = arg(None, "Offline data folder (default: $GAUSSCSE_DATA_DIR or ../shared/data, or the Hub).")
    train_datasets: list[str] | None = arg(
        None,
        f"Built-in NLI sources to train on, any of {TRAIN_SOURCES} (default: snli mnli, unless "
        "--train_file or --dataset_name is given).",
        fixes_run=True,
    )
    train_dataset_repeats: list[str] | None = arg(
        None,
        "Copies of each example of a built-in source per epoch, as name=count (e.g. lingnli=2 mnli=2: those rows "
        "weigh twice).",
        fixes_run=True,
    )
    train_file: list[str] | None = arg(
        None,
        "Training files (CSV, TSV, JSON, JSON Lines or Parquet; .gz too) of NLI rows (premise, hypothesis, label), "
        "triplets (anchor, positive, negative) or pairs (anchor, positive).",
        fixes_run=True,
    )
    validation_file: str | None = arg(None, "NLI rows to evaluate on instead of SNLI dev (metrics validation_*).")
    dataset_name: list[str] | None = arg(None, "Hub datasets to train on, e.g. stanfordnlp/snli.", fixes_run=True)
    dataset_config_name: list[str] | None = arg(None, "A config per --dataset_name, or 'none'.", fixes_run=True)
    train_split: str = arg("train", "Split of the --dataset_name datasets.", fixes_run=True)
    data_shape: str = arg("auto", f"Shape of the rows, one of {SHAPES} (auto: from column names).", fixes_run=True)
    columns: list[str] | None = arg(None, "Column name per role, as role=name, e.g. premise=sentence_A label=gold.")
    preprocessing_num_workers: int | None = arg(None, "Processes that tokenise the training examples.")
    data_cache_dir: str | None = arg(None, "Tokenised data cache (default: $HF_DATASETS_CACHE/gausscse).")
    max_seq_length: int = arg(TRAIN_MAX_LENGTH, "Truncation length in tokens for training.", fixes_run=True)
    max_train_examples: int | None = arg(None, "Use only the first N built examples.", fixes_run=True)
    pack_sequences: bool | None = arg(
        None,
        "Pack several sentences per row of the forward pass (BERT/RoBERTa-style encoders): same result, fewer "
        "padding tokens. Default: on the CPU (faster there), not on a GPU (slower there).",
        fixes_run=True,
    )
    pack_length: int | None = arg(None, "Tokens per packed row (default: 2 × max_seq_length).", fixes_run=True)
    drop_bad_rows: bool = arg(False, "Drop (and log) rows with missing fields or bad labels.", fixes_run=True)
    eval_max_examples: int | None = arg(
        None,
        "Evaluate on only the first N SNLI dev pairs during training (default: all 9,842); the choice of the scores' "
        "λ and α at the end takes --selection_max_examples.",
    )
    selection_max_examples: int | None = arg(
        None,
        "Choose the search score's λ and the entailment score's α at the end of training on only the first N pairs "
        "of each dev set (default: all of SNLI dev and LingNLI validation).",
    )
    eval_max_seq_length: int | None = arg(DEFAULT_MAX_LENGTH, "Evaluation truncation (default: the encoder's limit).")

    def __post_init__(self) -> None:
        if self.train_datasets is None and not self.train_file and not self.dataset_name:
            self.train_datasets = ["snli", "mnli"]
        unknown = [name for name in self.train_datasets or () if name not in TRAIN_SOURCES]
        if unknown:
            raise ValueError(f"Unknown --train_datasets {unknown}; valid: {', '.join(TRAIN_SOURCES)}")
        if self.max_seq_length < 2:
            raise ValueError(f"max_seq_length must be at least 2, got {self.max_seq_length}")
        for name in ("max_train_examples", "eval_max_examples", "selection_max_examples"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"--{name} must be a positive number of examples, got {getattr(self, name)}")
        if self.data_shape not in SHAPES:
            raise ValueError(f"Unknown --data_shape {self.data_shape!r}; valid: {', '.join(SHAPES)}")
        self.column_overrides = parse_column_overrides(self.columns)
        self.repeats = parse_repeats(self.train_dataset_repeats)


@dataclass
class GaussCSETrainingArguments(LossTermArguments, TrainingArguments):
    """``TrainingArguments`` with the loss options ([`LossTermArguments`] too) and the paper's defaults.
    ``--gradient_accumulation_steps`` does **not** enlarge the batch the negatives come from."""

    loss: str = arg("ent+con+rev", f"Training objective, one of {LOSS_NAMES}.", fixes_run=True)
    temperature: float = arg(0.05, "Temperature τ of the contrastive loss.", fixes_run=True)
    head_learning_rate: float | None = arg(
        1e-3, "Learning rate of the μ/σ² heads (None: --learning_rate).", fixes_run=True
    )
    output_dir: str | None = arg("outputs/gausscse", "Checkpoints and the final model.")
    overwrite_output_dir: bool = arg(False, "Train into a non-empty --output_dir, replacing the run there.")
    per_device_train_batch_size: int = arg(64, "Contrastive batch per process.", fixes_run=True)
    per_device_eval_batch_size: int = arg(128, "Sentences per forward in evaluation.")
    learning_rate: float = arg(3e-5, "Learning rate of the backbone (AdamW).", fixes_run=True)
    weight_decay: float = arg(0.01, "AdamW weight decay.", fixes_run=True)
    warmup_steps: float = arg(0.1, "Warm-up steps, or a ratio of the steps if < 1.", fixes_run=True)
    eval_strategy: str = arg("steps", "When to evaluate on SNLI dev.")
    eval_steps: float | None = arg(100, "Evaluate every N steps.")
    save_strategy: str = arg("steps", "When to save a checkpoint.")
    save_steps: float = arg(100, "Save a checkpoint every N steps.")
    save_total_limit: int | None = arg(2, "Checkpoints kept (the best one always is).")
    load_best_model_at_end: bool = arg(True, "End with the best checkpoint's weights (off with --eval_strategy no).")
    metric_for_best_model: str | None = arg("snli_dev_auprc", "Checkpoint selection.")
    greater_is_better: bool | None = arg(True, "Larger metric is better.")
    logging_steps: float = arg(10, "Log the loss every N steps.")
    remove_unused_columns: bool = arg(False, "Keep the triplet columns.")
    label_names: list[str] | None = field(default_factory=list, metadata={"help": "No labels: contrastive loss."})
    frozen_cache_gb: float | None = arg(
        None,
        "GiB of memory that keep the frozen layers' states (and a frozen μ) of each training sentence, so a sentence "
        "that comes back runs only the trained layers (unset: a quarter of the memory, at most 8; 0: off).",
    )

    def __post_init__(self) -> None:
        check_loss_name(self.loss)
        for name, (low, inclusive) in NUMERIC_FLAGS.items():
            value = getattr(self, name)
            if value is None or (name == "num_train_epochs" and self.max_steps > 0):
                continue
            if not math.isfinite(value) or value < low or (value == low and not inclusive):
                raise ValueError(f"--{name} must be a finite number {'>=' if inclusive else '>'} {low:g}, got {value}")
        check_terms(self, prefix="--")
        if self.max_steps == 0 or self.max_steps < -1:
            raise ValueError(f"--max_steps must be a positive number of steps (or -1), got {self.max_steps}")
        if self.loss == "simcse" and self.ddp_find_unused_parameters is None:
            self.ddp_find_unused_parameters = True  # SimCSE leaves the σ² head without gradient
        if self.eval_strategy == "no":  # no evaluation, no best checkpoint to pick: keep the last weights
            self.load_best_model_at_end = False
        accelerator = torch.accelerator.is_available() or is_torch_xla_available()
        if (self.bf16 or self.bf16_full_eval) and not self.use_cpu and not accelerator:
            self.use_cpu = True  # transformers refuses bf16 without a GPU unless use_cpu is set; a CPU autocasts it
        super().__post_init__()
        if self.loss == "ent" and self.per_device_train_batch_size * max(1, self.world_size) < 2:
            raise ValueError(
                "--loss ent needs at least 2 examples per (global) batch: raise --per_device_train_batch_size"
            )


# flag -> (smallest allowed value, whether the smallest is allowed itself); each must be finite (the terms: check_terms)
NUMERIC_FLAGS: dict[str, tuple[float, bool]] = {
    "frozen_cache_gb": (0.0, True),
    "learning_rate": (0.0, False),
    "head_learning_rate": (0.0, True),
    "temperature": (0.0, False),
    "weight_decay": (0.0, True),
    "warmup_steps": (0.0, True),
    "max_grad_norm": (0.0, True),
    "num_train_epochs": (0.0, False),
}


ARGUMENT_CLASSES = (ModelArguments, DataArguments, GaussCSETrainingArguments)
# the command-line fields that are GaussCSEConfig fields (the model's own settings; each fixes a run)
MODEL_FIELDS = tuple(
    item.name for item in fields(ModelArguments) if item.name in inspect.signature(GaussCSEConfig.__init__).parameters
)


def run_fixed_flags() -> tuple[str, ...]:
    """The flags a resumed run must keep, in field order: those marked ``FIXES_RUN``, ``MODEL_FIELDS``, the
    [`LossTermArguments`] and ``TRAINER_FIXED_FLAGS``."""
    always = {*MODEL_FIELDS, *(item.name for item in fields(LossTermArguments))}
    marked = [
        item.name
        for cls in ARGUMENT_CLASSES
        for item in fields(cls)
        if item.metadata.get(FIXES_RUN) or item.name in always
    ]
    return tuple(dict.fromkeys([*marked, *TRAINER_FIXED_FLAGS]))


USAGE = "%(prog)s [CONFIG.yaml|CONFIG.json] [--flag VALUE ...]"
DESCRIPTION = """\
Fine-tune an encoder into a GaussCSE model on NLI data. A YAML or JSON config file as the first argument gives \
values; the flags after it override them. The final (best) model goes into --output_dir, checkpoints into \
<output_dir>/checkpoint-N.

examples:
  gausscse-train configs/quickstart.yaml
  gausscse-train --model_name_or_path bert-base-uncased --train_file triplets.csv --output_dir out
  accelerate launch train_gausscse.py configs/paper.yaml --output_dir outputs/paper

Every --flag_name is also accepted as --flag-name. A true/false flag given alone means true (--bf16)."""


def init_fields(cls) -> list[str]:
    return [item.name for item in dataclasses.fields(cls) if item.init]


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown, but: each flag once (``--flag_name``, not also ``--flag-name``), no ``(default: None)`` after a
    help that explains its default, paragraphs with indented lines (the examples) kept as written."""

    def _format_action_invocation(self, action: argparse.Action) -> str:
        first, *others = action.option_strings or [None]
        if others:
            action = copy.copy(action)
            action.option_strings = [first, *(item for item in others if item != first.replace("_", "-"))]
        return super()._format_action_invocation(action)

    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None and "default" in (action.help or "").lower():
            return action.help
        return super()._get_help_string(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        fill = super()._fill_text
        return "\n\n".join(
            textwrap.indent(paragraph, indent) if "\n " in paragraph else fill(paragraph, width, indent)
            for paragraph in text.split("\n\n")
        )


class ArgumentParser(HfArgumentParser):
    """``HfArgumentParser`` that keeps GaussCSE's own field metadata (``FIXES_RUN``) from argparse."""

    @staticmethod
    def _parse_dataclass_field(parser: argparse.ArgumentParser, field: dataclasses.Field) -> None:
        field = copy.copy(field)
        field.metadata = types.MappingProxyType({k: v for k, v in field.metadata.items() if k != FIXES_RUN})
        HfArgumentParser._parse_dataclass_field(parser, field)


def build_parser() -> HfArgumentParser:
    """The parser of [`parse_arguments`], its ``--help`` in groups: ours, then every ``TrainingArguments`` flag (the
    groups only lay out the help; argparse parses with the parser's own action list)."""
    base, ours = TrainingArguments.__dataclass_fields__, GaussCSETrainingArguments.__dataclass_fields__
    added = {name for name in init_fields(GaussCSETrainingArguments) if name not in base}
    changed = [name for name in init_fields(TrainingArguments) if ours[name] is not base[name]]
    groups = [
        ("Model", "The backbone, the Gaussian heads and LoRA.", set(init_fields(ModelArguments))),
        ("Data", "The NLI training data and the SNLI dev evaluation.", set(init_fields(DataArguments))),
        ("GaussCSE training", "The loss and the other flags GaussCSE adds to transformers' TrainingArguments.", added),
        (
            "transformers TrainingArguments (all of them)",
            f"GaussCSE sets its own defaults for: {', '.join(changed)}.",
            set(init_fields(GaussCSETrainingArguments)) - added,
        ),
    ]
    parser = ArgumentParser(ARGUMENT_CLASSES, usage=USAGE, description=DESCRIPTION, formatter_class=HelpFormatter)
    listed = parser._optionals._group_actions  # every flag: HfArgumentParser adds them to the parser itself
    for title, description, names in groups:
        group = parser.add_argument_group(title, description)
        group._group_actions.extend(action for action in listed if action.dest in names)
        listed[:] = [action for action in listed if action.dest not in names]
    return parser


def parse_arguments(
    argv: Sequence[str] | None = None,
) -> tuple[ModelArguments, DataArguments, GaussCSETrainingArguments]:
    """Parse ``[CONFIG.{json,yaml}] [--flag value ...]``: a config file's values, overridden by the flags after it.
    Unknown names in the file or on the command line are errors naming them; ``--help`` prints and exits."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and Path(argv[0]).suffix in (".json", ".yaml", ".yml"):
        with open(argv[0], encoding="utf-8") as handle:
            values = json.load(handle) if argv[0].endswith(".json") else yaml.safe_load(handle)
        if not isinstance(values, dict):
            raise ValueError(f"{argv[0]}: expected a mapping of argument names to values, got {type(values).__name__}")
        unknown = sorted(set(values) - {name for cls in ARGUMENT_CLASSES for name in init_fields(cls)})
        if unknown:
            raise ValueError(f"{argv[0]}: unknown argument(s) {', '.join(unknown)}")
        parser.set_defaults(**values)
        argv = argv[1:]
    *arguments, remaining = parser.parse_args_into_dataclasses(args=argv, return_remaining_strings=True)
    if remaining:
        raise ValueError(f"Unknown argument(s): {' '.join(remaining)}")
    return tuple(arguments)
