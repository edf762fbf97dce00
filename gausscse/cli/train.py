"""Fine-tune an encoder into a GaussCSE model on NLI data.

    accelerate launch train_gausscse.py [CONFIG.yaml|.json] [--model_name_or_path ...] [--loss ent+con+rev] ...
    python train_gausscse.py configs/quickstart.yaml

    python train_gausscse.py --model_name_or_path bert-base-uncased --train_file triplets.csv --output_dir out

Training data: ``--train_datasets`` (built-in, offline), ``--train_file`` (CSV/TSV/JSON/JSON Lines/Parquet, NLI rows,
triplets or pairs) and ``--dataset_name`` (Hub), see ``gausscse.data.sources``. Flags after a config file override its
values. As in every Hugging Face example script, the final (best) model goes into ``--output_dir`` itself: weights,
config with ``auto_map`` and the code files, tokenizer, model card ``README.md``, ``train_results.json``; it loads
with ``AutoModel.from_pretrained(output_dir, trust_remote_code=True)`` and ``--push_to_hub --hub_model_id ...``
uploads exactly those files. Checkpoints are ``<output_dir>/checkpoint-N`` (``--resume_from_checkpoint``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets
import numpy as np
import torch.distributed as dist
from transformers import AutoConfig, AutoTokenizer, set_seed

from gausscse import GaussCSEModel
from gausscse.data.sources import DataError, DataStats, load_file_source, load_training_examples, source_rows
from gausscse.data.tokenize import tokenize_examples
from gausscse.io import check_not_nested, check_output_location
from gausscse.loading import is_complete_checkpoint, latest_complete_checkpoint, load_model
from gausscse.model.adapters_gausscse import recorded_backbone
from gausscse.model.modeling_gausscse import resolve_max_length
from gausscse.training.arguments import (
    MODEL_FIELDS,
    DataArguments,
    GaussCSETrainingArguments,
    ModelArguments,
    parse_arguments,
    run_fixed_flags,
)
from gausscse.training.batch import TripletCollator, packs_by_default
from gausscse.training.lora import apply_lora, has_lora, make_adapters_trainable
from gausscse.training.losses import uses_contradictions
from gausscse.training.run_lock import OutputDirLockedError, RunLock
from gausscse.training.save import check_hub_push, push_model_folder, save_model_folder
from gausscse.training.trainer import RUN_ARGUMENTS_FILE, GaussCSETrainer

logger = logging.getLogger(__name__)


def model_overrides(model_args: ModelArguments) -> dict[str, str]:
    """The GaussCSEConfig fields given on the command line (``None`` = not given: the config's default)."""
    return {name: getattr(model_args, name) for name in MODEL_FIELDS if getattr(model_args, name) is not None}


def load_backbone_config(model_args: ModelArguments):
    """The config of ``--model_name_or_path``; its shipped code (``auto_map``) runs only with --trust_remote_code."""
    try:
        return AutoConfig.from_pretrained(model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code)
    except ValueError as error:
        if "trust_remote_code" not in str(error):
            raise
        raise ValueError(
            f"--model_name_or_path {model_args.model_name_or_path} needs its own Python code (the auto_map of its "
            "config.json) to load; gausscse-train runs it only with --trust_remote_code: read that code first"
        ) from error


def build_model(model_args: ModelArguments) -> GaussCSEModel:
    """A GaussCSE folder (full or LoRA adapter) continues training with its own config (a flag that contradicts it is
    an error); any other encoder gets fresh heads as ``--start`` sets them up, single fields overridden by the flags
    given. Then LoRA or a frozen backbone."""
    config = load_backbone_config(model_args)
    overrides = model_overrides(model_args)
    if config.model_type == "gausscse":
        conflicts = [
            f"--{name} {value} (the model has {getattr(config, name)!r})"
            for name, value in overrides.items()
            if getattr(config, name) != value
        ]
        if conflicts:
            raise ValueError(
                f"--model_name_or_path {model_args.model_name_or_path} is a GaussCSE model being continued; its "
                f"config fixes these, drop the flags or start from its encoder: {', '.join(conflicts)}"
            )
        model = load_model(model_args.model_name_or_path).train()
        if has_lora(model):
            if model_args.lora_r > 0:
                raise ValueError(
                    f"--model_name_or_path {model_args.model_name_or_path} carries LoRA adapters already: they "
                    "continue training; drop --lora_r"
                )
            make_adapters_trainable(model)
        elif model_args.lora_r > 0 and not model_args.merge_lora:
            raise ValueError(
                f"--lora_r on the GaussCSE model {model_args.model_name_or_path} needs --merge_lora: an unmerged "
                "adapter names its backbone, and this model's fine-tuned encoder is not one anyone can fetch"
            )
    else:
        model = GaussCSEModel.from_backbone(
            model_args.model_name_or_path,
            start=model_args.start,
            encoder_kwargs={"trust_remote_code": model_args.trust_remote_code},
            **overrides,
        )
    if model_args.freeze_backbone:
        model.encoder.requires_grad_(False)
        if model.variance_layers is not None:
            model.variance_layers.requires_grad_(False)
    if model_args.lora_r > 0 and model.variance_layers is not None:
        raise ValueError(
            "--lora_r with --variance_layers: the encoder is the model's frozen μ path and its trained part is the "
            "copied top layers already; drop --lora_r (or train two paths: --variance_layers 0)"
        )
    if model_args.lora_r > 0:
        apply_lora(
            model, model_args.lora_r, model_args.lora_alpha, model_args.lora_dropout, model_args.lora_target_modules
        )
    return model


def build_evaluator(data_args: DataArguments, training_args: GaussCSETrainingArguments):
    """The dev evaluator of ``gausscse.evaluation.dev_evaluator`` on SNLI dev or ``--validation_file`` (``None``
    when evaluation is off). With ``--validation_file`` the metrics are ``validation_*`` and a ``snli_dev_*``
    best-model metric follows."""
    if training_args.eval_strategy == "no":
        return None
    from gausscse.evaluation.dev_evaluator import SNLIDevEvaluator
    from gausscse.evaluation.tasks import NLIPairs

    pairs, name = None, "snli_dev"
    if data_args.validation_file is not None:
        source = load_file_source(data_args.validation_file, "nli", data_args.column_overrides)
        rows = list(source_rows(source, data_args.drop_bad_rows, DataStats()))
        if data_args.eval_max_examples is not None:
            rows = rows[: data_args.eval_max_examples]
        if not rows:
            raise DataError(f"{data_args.validation_file}: no labelled row to evaluate on")
        entailment = sum(label == "entailment" for _, _, label in rows)
        if entailment in (0, len(rows)):
            raise DataError(
                f"--validation_file {data_args.validation_file}: all {len(rows)} labelled rows are "
                f"{'entailment' if entailment else 'neutral or contradiction'}; the binary NLI evaluation needs "
                "entailment rows and others (or pass --eval_strategy no)"
            )
        premises, hypotheses, labels = (list(column) for column in zip(*rows, strict=True))
        pairs, name = (
            NLIPairs(
                name="validation",
                premises=premises,
                hypotheses=hypotheses,
                is_entailment=np.array([label == "entailment" for label in labels]),
                entails_both_ways=np.zeros(len(rows), dtype=bool),
            ),
            "validation",
        )
        metric = training_args.metric_for_best_model
        if metric and metric.startswith("snli_dev_"):
            training_args.metric_for_best_model = "validation_" + metric.removeprefix("snli_dev_")
    return SNLIDevEvaluator(
        data_dir=data_args.data_dir,
        max_examples=data_args.eval_max_examples,
        batch_size=training_args.per_device_eval_batch_size,
        max_length=data_args.eval_max_seq_length,
        pairs=pairs,
        name=name,
        point=training_args.loss == "simcse",
    )


def resolve_resume(training_args: GaussCSETrainingArguments) -> str | None:
    """``--resume_from_checkpoint``: ``true`` → the latest complete ``checkpoint-N`` of ``--output_dir``; a path → that
    checkpoint, which must be complete; unset/``false`` → ``None``. Half-written checkpoints are never picked."""
    value = training_args.resume_from_checkpoint
    if value is None or str(value).lower() in ("", "false"):
        return None
    if str(value).lower() == "true":
        latest = latest_complete_checkpoint(training_args.output_dir)
        if latest is None:
            raise ValueError(
                f"--resume_from_checkpoint true: no complete checkpoint-N in --output_dir {training_args.output_dir}"
            )
        return str(latest)
    if not Path(value).is_dir():
        raise ValueError(f"--resume_from_checkpoint {value}: no such checkpoint folder")
    if not is_complete_checkpoint(value):
        raise ValueError(
            f"--resume_from_checkpoint {value}: the checkpoint is incomplete (its save was cut short); use "
            "--resume_from_checkpoint true for the latest complete one"
        )
    return str(value)


RUN_FIXED_FLAGS = run_fixed_flags()  # the flags a resumed run must keep (fields marked FIXES_RUN, ...)


def run_arguments(*arguments) -> dict:
    """The ``RUN_FIXED_FLAGS`` values of the parsed argument dataclasses, as JSON values (what a checkpoint records)."""
    values = {}
    for group in arguments:
        for name in RUN_FIXED_FLAGS:
            if hasattr(group, name):
                values[name] = json.loads(json.dumps(getattr(group, name), default=str))
    return values


def check_resume_arguments(checkpoint: str, current: dict) -> None:
    """Refuse to resume ``checkpoint`` with flags that differ from those its run was trained with, naming each; a
    checkpoint written before runs recorded them is resumed with a warning."""
    recorded_file = Path(checkpoint) / RUN_ARGUMENTS_FILE
    if not recorded_file.is_file():
        logger.warning("%s records no run arguments: the resumed run is not checked against them", checkpoint)
        return
    recorded = json.loads(recorded_file.read_text(encoding="utf-8"))
    changed = [
        f"--{name} {current[name]!r} (the checkpoint's run: {recorded[name]!r})"
        for name in RUN_FIXED_FLAGS
        if name in recorded and name in current and recorded[name] != current[name]
    ]
    if changed:
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint} was trained with other settings, and a resumed run must keep them "
            f"(give the values of the checkpoint's run, or start a new run): {'; '.join(changed)}"
        )


def check_output_dir(training_args: GaussCSETrainingArguments) -> None:
    """A non-empty ``--output_dir`` holds an earlier run: refuse it unless ``--overwrite_output_dir`` or a resume from
    one of its own checkpoints (a checkpoint of another run does not make this folder's model replaceable)."""
    output_dir = Path(training_args.output_dir)
    resume = training_args.resume_from_checkpoint
    if training_args.overwrite_output_dir or (resume and Path(resume).resolve().parent == output_dir.resolve()):
        return
    if output_dir.is_dir() and any(output_dir.iterdir()):
        held = sorted(path.name for path in output_dir.iterdir())[:5]
        elsewhere = f" (--resume_from_checkpoint {resume} is not one of its checkpoints)" if resume else ""
        raise ValueError(
            f"--output_dir {output_dir} is not empty (it holds {', '.join(held)}, ...){elsewhere}: an earlier run "
            "would be replaced. Pass --overwrite_output_dir to replace it, --resume_from_checkpoint true to continue "
            "it, or choose another --output_dir"
        )


def check_output_dir_apart(model_args: ModelArguments, training_args: GaussCSETrainingArguments) -> None:
    """Refuse an ``--output_dir`` that is, holds or lies inside a local folder the run starts from (relative paths and
    symbolic links resolved): ``--model_name_or_path``, and for an adapter folder the backbone its adapter names. The
    final save would overwrite that model, and a LoRA run's adapter would name its own folder as its backbone."""
    model_path = Path(model_args.model_name_or_path)
    if not model_path.exists():  # a Hub id
        return
    why = "the final model would overwrite the model the run starts from; choose an --output_dir outside it"
    check_not_nested(training_args.output_dir, "--output_dir", model_path, "--model_name_or_path", why)
    backbone = recorded_backbone(model_path)
    if backbone is not None and Path(backbone).exists():
        flag = f"the backbone of --model_name_or_path {model_args.model_name_or_path},"
        check_not_nested(training_args.output_dir, "--output_dir", backbone, flag, why)


def final_evaluation_figure(evaluator, model_name: str, folder: Path) -> Path | None:
    """The model card's figure (precision–recall and generality gap) from the final evaluation's encoded sentences,
    written into ``folder``; ``None`` when no evaluation ran."""
    if evaluator is None or evaluator.last_encoded is None:
        return None
    from gausscse.drawing.reports import plot_dev_summary

    title = f"{model_name}: final evaluation on {evaluator.name} ({len(evaluator.pairs)} pairs)"
    return plot_dev_summary(evaluator.last_encoded, evaluator.pairs, title, folder / "evaluation.png")


@contextmanager
def hold_output_dir(training_args: GaussCSETrainingArguments) -> Iterator[None]:
    """Hold ``--output_dir``'s run lock ([`gausscse.training.run_lock.RunLock`], a file beside the folder) until the
    block ends, exception or not: a second run into a folder a running one holds is refused with
    [`OutputDirLockedError`], ``--overwrite_output_dir`` or not. With several processes (``accelerate launch``,
    ``torchrun``) only the main process (``process_index`` 0) takes the lock, and it tells the others in one collective
    call whether it got it, so every process of a refused run stops before touching the folder."""
    lock = RunLock(training_args.output_dir) if training_args.process_index == 0 else None
    refusal: Exception | None = None
    if lock is not None:
        try:
            lock.acquire()
        except Exception as error:  # told to the other processes first, then raised
            refusal = error
    if training_args.world_size > 1 and dist.is_available() and dist.is_initialized():
        decision = [None if refusal is None else str(refusal)]
        dist.broadcast_object_list(decision, src=0)
        if refusal is None and decision[0] is not None:
            refusal = OutputDirLockedError(decision[0])
    if refusal is not None:
        raise refusal
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def main(argv: list[str] | None = None) -> Path:
    """Parse → lock ``--output_dir`` → build → train → evaluate → save (+ card) → optional push → unlock. Returns the
    final model folder."""
    model_args, data_args, training_args = parse_arguments(argv)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.should_log else logging.WARNING,
    )
    push = training_args.push_to_hub
    if push:  # before anything is read or written: a push that cannot work stops the run here, not after training
        adapter = model_args.lora_r > 0 and not model_args.merge_lora
        check_hub_push(
            training_args.hub_model_id, training_args.hub_token, model_args.model_name_or_path if adapter else None
        )
    training_args.push_to_hub = False  # push the final folder only, not every checkpoint
    check_output_location(training_args.output_dir, "--output_dir")  # a file, the working directory, unwritable
    check_output_dir_apart(model_args, training_args)
    with hold_output_dir(training_args):  # before the folder is looked at; held until its model is saved and pushed
        return train_and_save(model_args, data_args, training_args, push)


def dev_curve(log_history: list[dict]) -> list[dict]:
    """The dev evaluations during training, in order: ``{"step", "elapsed_seconds", <metric>: value}`` for each log
    entry with ``eval_`` metrics before the training's summary (``train_runtime``), so not the evaluation of the final
    (best) weights after it. ``elapsed_seconds``: wall-clock since training began in that process
    (``GaussCSETrainer.log``)."""
    curve = []
    for entry in log_history:
        if "train_runtime" in entry:
            break
        metrics = {name.removeprefix("eval_"): value for name, value in entry.items() if name.startswith("eval_")}
        if metrics:
            curve.append({"step": entry["step"], "elapsed_seconds": entry.get("elapsed_seconds"), **metrics})
    return curve


def train_and_save(
    model_args: ModelArguments, data_args: DataArguments, training_args: GaussCSETrainingArguments, push: bool
) -> Path:
    """The body of [`main`], run while it holds ``--output_dir``: check the folder and the resume, train, evaluate,
    save the final model (+ card) and push it when ``push``. Returns the final model folder."""
    training_args.resume_from_checkpoint = resolve_resume(training_args)
    check_output_dir(training_args)
    fixed = run_arguments(model_args, data_args, training_args)
    if training_args.resume_from_checkpoint:
        check_resume_arguments(training_args.resume_from_checkpoint, fixed)
    set_seed(training_args.seed)
    trainer, data_stats = build_trainer(model_args, data_args, training_args, fixed)
    model, evaluator = trainer.model, trainer.evaluator
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    metrics = trainer.evaluate()
    search = set_search_kl_weight(model, evaluator, data_args) if evaluator and trainer.is_world_process_zero() else {}
    results = {
        **train_output.metrics,
        **metrics,
        # The checkpoint whose weights the final model has; None: the last step's weights.
        "best_model_checkpoint": (
            trainer.state.best_model_checkpoint if training_args.load_best_model_at_end else None
        ),
        "loss": training_args.loss,
        "train_examples": len(trainer.train_dataset),
        "eval_max_examples": data_args.eval_max_examples,  # SNLI-dev pairs behind the eval_* metrics (None: all)
        "dev_curve": dev_curve(trainer.state.log_history),
        "data": data_stats.as_dict(),
        **search,
    }
    model_dir = Path(training_args.output_dir)
    if trainer.is_world_process_zero():
        card = model_card_fields(model_args, data_args, training_args, trainer, metrics, data_stats)
        with tempfile.TemporaryDirectory() as scratch:
            figure = final_evaluation_figure(evaluator, card["model_name"], Path(scratch))
            tokenizer = trainer.processing_class
            save_model_folder(model, tokenizer, model_dir, card, results, merge=model_args.merge_lora, figure=figure)
        logger.info("Final model saved to %s", model_dir)
        if push:
            url = push_model_folder(
                model_dir, training_args.hub_model_id, training_args.hub_token, training_args.hub_private_repo
            )
            logger.info("Pushed %s: %s", model_dir, url)
    return model_dir


def build_trainer(
    model_args: ModelArguments, data_args: DataArguments, training_args: GaussCSETrainingArguments, fixed: dict
) -> tuple[GaussCSETrainer, DataStats]:
    """The training data (read, cut to ``--max_train_examples``, tokenised), the dev evaluator (its data read now: a
    bad file stops before training), the tokenizer and the model, in a [`GaussCSETrainer`]; and the data's stats.
    ``fixed``: the run's [`run_arguments`], recorded with each checkpoint."""
    examples, data_stats = load_training_examples(data_args.data_spec(), drop_bad_rows=data_args.drop_bad_rows)
    if data_args.max_train_examples is not None:
        examples = examples.select(range(min(data_args.max_train_examples, len(examples))))
    evaluator = build_evaluator(data_args, training_args)
    tokenizer = AutoTokenizer.from_pretrained(
        model_args.model_name_or_path, trust_remote_code=model_args.trust_remote_code
    )
    model = build_model(model_args)
    if training_args.loss == "simcse" and model.config.frozen_mean:
        raise ValueError(
            "--loss simcse trains μ alone, and this model takes μ from a frozen copy of its backbone (frozen_mean, "
            f"what --start {model_args.start} sets up for {model_args.model_name_or_path}): nothing would train; "
            "pass --frozen_mean false"
        )
    model.config.point_embeddings = training_args.loss == "simcse"
    model.get_tokenizer(tokenizer)  # its saves (checkpoints, the final folder) write this one, not a reloaded copy
    max_length = resolve_max_length(tokenizer, model.config.encoder_config, data_args.max_seq_length)
    if max_length < data_args.max_seq_length:
        logger.warning("--max_seq_length %d is above the encoder's limit: %d", data_args.max_seq_length, max_length)
    with training_args.main_process_first(desc="tokenizing the training examples"):
        train_dataset = tokenize_examples(
            examples,
            tokenizer,
            max_length,
            cache_dir=data_args.data_cache_dir or Path(datasets.config.HF_DATASETS_CACHE) / "gausscse",
            num_proc=data_args.preprocessing_num_workers,
        )
    collator = TripletCollator.for_tokenizer(
        tokenizer,
        model.config.encoder_config,
        with_contradictions=uses_contradictions(training_args.loss),
        pack=(
            packs_by_default(training_args.device, model.config.encoder_config)
            if data_args.pack_sequences is None
            else data_args.pack_sequences
        ),
        pack_length=data_args.pack_length or 2 * max_length,
    )
    trainer = GaussCSETrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=collator,
        processing_class=tokenizer,
        evaluator=evaluator,
        run_arguments=fixed,
    )
    return trainer, data_stats


def model_card_fields(
    model_args: ModelArguments,
    data_args: DataArguments,
    training_args: GaussCSETrainingArguments,
    trainer: GaussCSETrainer,
    metrics: dict,
    data_stats: DataStats,
) -> dict:
    """The keyword arguments of the final model's card (``render_model_card``) for this run."""
    return {
        "model_name": training_args.hub_model_id or Path(training_args.output_dir).name,
        "base_model": model_args.model_name_or_path,
        "datasets": [*(data_args.train_datasets or ()), *(data_args.dataset_name or ())],  # the card names Hub ids
        "metrics": {name.removeprefix("eval_"): value for name, value in metrics.items()},
        "training_arguments": {  # the card's training-setup table picks its settings from these
            **dataclasses.asdict(model_args),
            **dataclasses.asdict(data_args),
            **training_args.to_sanitized_dict(),
            **{name: getattr(trainer.model.config, name) for name in MODEL_FIELDS},  # as the model resolved them
            "world_size": training_args.world_size,
            "retrieval_weight": getattr(trainer.loss_fn, "retrieval_weight", None),  # as the loss used it
            "pack_sequences": trainer.data_collator.pack,  # as the collator packed (unset: by device)
        },
        "data_stats": data_stats.as_dict(),
    }


def set_search_kl_weight(model: GaussCSEModel, evaluator, data_args: DataArguments) -> dict:
    """Choose the λ of the model's search score on the dev data's entailment retrieval (all of SNLI dev, or
    ``--validation_file``) and set ``config.search_kl_weight`` (``gausscse.evaluation.search_weight``); returns the
    metrics to report (``{}`` for a model of no KL reduction, whose similarity is no inner product)."""
    from gausscse.evaluation.search_weight import choose_kl_weight
    from gausscse.evaluation.tasks import NLI_DEV, load_nli, retrieval_set
    from gausscse.model.gaussian import KL_REDUCTIONS

    if model.config.similarity_reduction not in KL_REDUCTIONS or evaluator.point:
        return {}
    pairs = (
        evaluator.pairs if evaluator.name != "snli_dev" else load_nli("snli_dev", *NLI_DEV, data_dir=data_args.data_dir)
    )
    weight, curve = choose_kl_weight(model, retrieval_set(pairs), max_length=data_args.eval_max_seq_length)
    model.config.search_kl_weight = weight
    logger.info(
        "search score cos − λ·KL/d: λ = %g (%s retrieval nDCG@10 %.2f; cosine %.2f)",
        weight,
        evaluator.name,
        curve[weight],
        curve[0.0],
    )
    return {
        "search_kl_weight": weight,
        f"{evaluator.name}_search_ndcg@10": curve[weight],
        f"{evaluator.name}_cosine_ndcg@10": curve[0.0],
    }


def run() -> None:
    """Console-script entry point (``gausscse-train``): errors in the input (bad flags, data, a backbone that needs
    --trust_remote_code, a push to the Hub that cannot work, an --output_dir another run holds — checked before
    anything is written) end it with one line and exit status 2, without a traceback."""
    try:
        main(sys.argv[1:])
    # HubPushError and DataError are ValueErrors, OutputDirLockedError (a held --output_dir) a FileExistsError
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        print(f"gausscse-train: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    run()
