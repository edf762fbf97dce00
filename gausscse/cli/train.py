"""``gausscse-train`` / ``train_gausscse.py``: fine-tune an encoder into a GaussCSE model on NLI data; the final
model goes into ``--output_dir`` itself, checkpoints into ``<output_dir>/checkpoint-N``."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import datasets
import numpy as np
import torch.distributed as dist
from peft import PeftModel
from transformers import AutoConfig, AutoTokenizer, PreTrainedConfig, set_seed

from gausscse import GaussCSEModel
from gausscse.data.sources import DataError, DataSpec, DataStats, load_file_source, load_training_examples, source_rows
from gausscse.data.tokenize import tokenize_examples
from gausscse.io import check_not_nested, check_output_location, json_value
from gausscse.loading import (
    ModelLoadError,
    adapter_base_of,
    check_model_reference,
    is_complete_checkpoint,
    latest_complete_checkpoint,
    load_model,
)
from gausscse.model.adapters_gausscse import BASE_FOLDER
from gausscse.model.backbone_gausscse import local_backbone
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
from gausscse.training.lora import apply_lora, load_for_training
from gausscse.training.losses import uses_contradictions
from gausscse.training.progress import JobEstimateCallback
from gausscse.training.run_lock import OutputDirLockedError, RunLock
from gausscse.training.save import check_hub_push, push_model_folder, save_model_folder
from gausscse.training.trainer import RUN_ARGUMENTS_FILE, GaussCSETrainer

logger = logging.getLogger(__name__)
RUN_FIXED_FLAGS = run_fixed_flags()


def build_model(
    model_args: ModelArguments, tokenizer=None, output_dir: Path | None = None
) -> GaussCSEModel | PeftModel:
    """A GaussCSE folder (full or adapter) continues with its own config (a flag contradicting it is an error); any
    other encoder gets fresh heads as ``--start`` and the model flags set them up. Then LoRA (unmerged from a new
    model: that model saved first, with ``tokenizer``, as the adapter's base ``output_dir/base-model``) or a frozen
    backbone."""
    name = model_args.model_name_or_path
    overrides = {key: getattr(model_args, key) for key in MODEL_FIELDS if getattr(model_args, key) is not None}
    if adapter_base_of(name) is not None:
        if model_args.lora_r > 0:
            raise ValueError(
                f"--model_name_or_path {name} carries LoRA adapters already: they continue training; drop --lora_r"
            )
        model = load_for_training(name)
        check_fixed_flags(name, model.config, overrides)
        return model
    try:  # the code a config ships (auto_map) runs only with --trust_remote_code
        config = AutoConfig.from_pretrained(name, trust_remote_code=model_args.trust_remote_code)
    except ValueError as error:
        if "trust_remote_code" not in str(error):
            raise
        raise ValueError(
            f"--model_name_or_path {name} needs its own Python code (auto_map), run only with --trust_remote_code"
        ) from error
    if config.model_type == "gausscse":
        check_fixed_flags(name, config, overrides)
        model = load_model(name).train()
        model.name_or_path = local_backbone(str(name))  # what an adapter on it records as its base
    else:
        if model_args.lora_r > 0 and model_args.variance_layers is None:
            overrides["variance_layers"] = 0  # LoRA adapts a whole encoder for log σ²: not a copied top layer
        encoder_kwargs = {"trust_remote_code": model_args.trust_remote_code}
        model = GaussCSEModel.from_backbone(name, start=model_args.start, encoder_kwargs=encoder_kwargs, **overrides)
    if model_args.freeze_backbone:
        model.encoder.requires_grad_(False)
        if model.variance_layers is not None:
            model.variance_layers.requires_grad_(False)
    if model_args.lora_r > 0:
        base_folder = None  # an unmerged run on a new model saves that model as its adapter's base
        if config.model_type != "gausscse" and not model_args.merge_lora and output_dir is not None:
            model.get_tokenizer(tokenizer)
            base_folder = output_dir / BASE_FOLDER
        args = model_args
        return apply_lora(model, args.lora_r, args.lora_alpha, args.lora_dropout, args.lora_target_modules, base_folder)
    return model


def check_fixed_flags(name: str, config, overrides: dict) -> None:
    """``ValueError`` naming the model flags that contradict the config of the GaussCSE model ``name``."""
    conflicts = ", ".join(
        f"--{key} {value} (the model has {getattr(config, key)!r})"
        for key, value in overrides.items()
        if getattr(config, key) != value
    )
    if conflicts:
        raise ValueError(f"--model_name_or_path {name} fixes {conflicts}: drop the flags or start from its encoder")


def lora_base(model_args: ModelArguments, output_dir: str | Path) -> str | None:
    """The base model the final folder's adapter will name (``None``: no adapter): an adapter folder's own base, the
    GaussCSE model the run starts from, or the new model saved in ``output_dir/base-model``."""
    name = model_args.model_name_or_path
    base = adapter_base_of(name)
    if model_args.merge_lora or base is not None or model_args.lora_r == 0:
        return None if model_args.merge_lora else base
    try:
        config, _ = PreTrainedConfig.get_config_dict(name)
    except (OSError, ValueError):
        config = {}
    return name if config.get("model_type") == "gausscse" else str(Path(output_dir).absolute() / BASE_FOLDER)


def build_evaluator(data_args: DataArguments, training_args: GaussCSETrainingArguments):
    """The dev evaluator on SNLI dev, or on the labelled rows of ``--validation_file`` (metrics ``validation_*``; a
    ``snli_dev_*`` best-model metric follows; ``DataError`` without rows of both classes); ``None`` when evaluation
    is off."""
    if training_args.eval_strategy == "no":
        return None
    from gausscse.evaluation.dev_evaluator import SNLIDevEvaluator
    from gausscse.evaluation.tasks import NLIPairs

    pairs, name, path = None, "snli_dev", data_args.validation_file
    if path is not None:
        source = load_file_source(path, "nli", data_args.column_overrides)
        rows = list(source_rows(source, data_args.drop_bad_rows, DataStats()))[: data_args.eval_max_examples]
        if not rows:
            raise DataError(f"{path}: no labelled row to evaluate on")
        premises, hypotheses, labels = (list(column) for column in zip(*rows, strict=True))
        is_entailment = np.array([label == "entailment" for label in labels])
        if is_entailment.all() or not is_entailment.any():
            kind = "entailment" if is_entailment.all() else "neutral or contradiction"
            need = "entailment rows and others (or pass --eval_strategy no)"
            raise DataError(f"--validation_file {path}: all {len(rows)} labelled rows are {kind}; it needs {need}")
        both_ways = np.zeros(len(rows), dtype=bool)
        pairs = NLIPairs("validation", premises, hypotheses, is_entailment, entails_both_ways=both_ways)
        name, metric = "validation", training_args.metric_for_best_model
        if metric and metric.startswith("snli_dev_"):
            training_args.metric_for_best_model = "validation_" + metric.removeprefix("snli_dev_")
    return SNLIDevEvaluator(
        data_dir=data_args.data_dir,
        max_examples=data_args.eval_max_examples,
        batch_size=training_args.per_device_eval_batch_size,
        max_length=data_args.eval_max_seq_length,
        pairs=pairs,
        name=name,
    )


def run_arguments(*arguments) -> dict:
    """The ``RUN_FIXED_FLAGS`` values of the parsed argument dataclasses as JSON values (what a checkpoint records)."""
    return {
        name: json.loads(json.dumps(getattr(group, name), default=str))
        for group in arguments
        for name in RUN_FIXED_FLAGS
        if hasattr(group, name)
    }


def resolve_resume(training_args: GaussCSETrainingArguments, fixed: dict) -> str | None:
    """The checkpoint of ``--resume_from_checkpoint`` (``true``: the latest complete ``checkpoint-N``; a path: if
    complete; unset/``false``: ``None``), after refusing a non-empty ``--output_dir`` not overwritten nor resumed from,
    and a resume whose ``fixed`` flags differ from those its checkpoint records (none recorded: a warning)."""
    output_dir, resume = Path(training_args.output_dir), training_args.resume_from_checkpoint
    if resume is None or str(resume).lower() in ("", "false"):
        resume = None
    elif str(resume).lower() == "true":
        resume = latest_complete_checkpoint(output_dir)
        if resume is None:
            raise ValueError(f"--resume_from_checkpoint true: no complete checkpoint-N in --output_dir {output_dir}")
    elif not Path(resume).is_dir():
        raise ValueError(f"--resume_from_checkpoint {resume}: no such checkpoint folder")
    elif not is_complete_checkpoint(resume):
        raise ValueError(
            f"--resume_from_checkpoint {resume}: the checkpoint is incomplete (its save was cut short); use "
            "--resume_from_checkpoint true for the latest complete one"
        )
    own_checkpoint = resume and Path(resume).resolve().parent == output_dir.resolve()
    if output_dir.is_dir() and any(output_dir.iterdir()) and not (training_args.overwrite_output_dir or own_checkpoint):
        elsewhere = f"; --resume_from_checkpoint {resume} is not one of its checkpoints" if resume else ""
        raise ValueError(
            f"--output_dir {output_dir} is not empty (an earlier run{elsewhere}): pass --overwrite_output_dir to "
            "replace it, --resume_from_checkpoint true to continue it, or choose another --output_dir"
        )
    if resume is None:
        return None
    recorded_file = Path(resume) / RUN_ARGUMENTS_FILE
    if not recorded_file.is_file():
        logger.warning("%s records no run arguments: the resumed run is not checked against them", resume)
    else:
        recorded = json_value(recorded_file.read_bytes(), recorded_file)
        changed = [
            f"--{name} {fixed[name]!r} (the checkpoint's run: {recorded[name]!r})"
            for name in RUN_FIXED_FLAGS
            if name in recorded and recorded[name] != fixed[name]
        ]
        if changed:
            raise ValueError(f"--resume_from_checkpoint {resume} was trained with other settings: {'; '.join(changed)}")
    return str(resume)


@contextmanager
def hold_output_dir(training_args: GaussCSETrainingArguments) -> Iterator[None]:
    """Hold ``--output_dir``'s [`RunLock`] for the block. Only process 0 takes it and tells the others in one
    collective call whether it did, so every process of a refused run stops ([`OutputDirLockedError`])."""
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
    """Parse, check the push and ``--output_dir``, lock it, train, save (+ card), push; returns the model folder."""
    model_args, data_args, training_args = parse_arguments(argv)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.should_log else logging.WARNING,
    )
    push = training_args.push_to_hub
    if push:  # before anything is read or written: a push that cannot work stops the run here, not after training
        base = lora_base(model_args, training_args.output_dir)
        check_hub_push(training_args.hub_model_id, training_args.hub_token, base)
    training_args.push_to_hub = False  # push the final folder only, not every checkpoint
    output_dir, model_path = training_args.output_dir, Path(model_args.model_name_or_path)
    try:  # a missing folder, or a Hub id the offline Hub cannot give: one line now, not transformers' traceback later
        check_model_reference(model_args.model_name_or_path)
    except ModelLoadError as error:
        raise FileNotFoundError(f"--model_name_or_path {error}") from None
    check_output_location(output_dir, "--output_dir")
    if model_path.exists():  # a local model: the final save must not overwrite it (nor an adapter's backbone)
        why = "the final model would overwrite the model the run starts from; choose an --output_dir outside it"
        check_not_nested(output_dir, "--output_dir", model_path, "--model_name_or_path", why)
        base = adapter_base_of(model_path)
        if base is not None and Path(base).exists():
            flag = f"the base model of --model_name_or_path {model_args.model_name_or_path},"
            check_not_nested(output_dir, "--output_dir", base, flag, why)
    with hold_output_dir(training_args):
        return train_and_save(model_args, data_args, training_args, push)


def train_and_save(
    model_args: ModelArguments, data_args: DataArguments, training_args: GaussCSETrainingArguments, push: bool
) -> Path:
    """The body of [`main`] while it holds ``--output_dir``: resume checks, training, evaluation, save, push."""
    fixed = run_arguments(model_args, data_args, training_args)
    training_args.resume_from_checkpoint = resolve_resume(training_args, fixed)
    set_seed(training_args.seed)
    trainer, data_stats = build_trainer(model_args, data_args, training_args, fixed)
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    metrics = trainer.evaluate()
    model_dir = Path(training_args.output_dir)
    if not trainer.is_world_process_zero():
        return model_dir
    curve = []  # the dev evaluations during training: the entries before train_runtime's summary
    for entry in trainer.state.log_history:
        if "train_runtime" in entry:
            break
        scores = {name.removeprefix("eval_"): value for name, value in entry.items() if name.startswith("eval_")}
        if scores:
            curve.append({"step": entry["step"], "elapsed_seconds": entry.get("elapsed_seconds"), **scores})
    choosing, failed = time.perf_counter(), None
    try:
        chosen = choose_scores(trainer, data_args)
    except Exception as error:  # the trained model is saved first (without what was not chosen), then the error
        chosen, failed = {}, error
    chosen["choice_seconds"] = time.perf_counter() - choosing  # the end-of-training choices' wall time
    results = {
        **train_output.metrics,
        **metrics,
        # the checkpoint whose weights the final model has; None: the last step's
        "best_model_checkpoint": trainer.state.best_model_checkpoint if training_args.load_best_model_at_end else None,
        "loss": training_args.loss,
        "train_examples": len(trainer.train_dataset),
        "eval_max_examples": data_args.eval_max_examples,  # SNLI-dev pairs behind the eval_* metrics (None: all)
        "dev_curve": curve,
        "data": data_stats.as_dict(),
        **chosen,
    }
    card = model_card_fields(model_args, data_args, trainer, metrics, data_stats)
    card["alpha_at_grid_top"] = bool(chosen.get("entailment_at_grid_edge"))  # the card says what the log warned
    evaluator, figure = trainer.evaluator, None
    with tempfile.TemporaryDirectory() as scratch:
        if evaluator is not None and evaluator.last_encoded is not None:  # the final evaluation's figure for the card
            from gausscse.drawing.reports import plot_dev_summary

            title = f"{card['model_name']}: final evaluation on {evaluator.name} ({len(evaluator.pairs)} pairs)"
            figure = plot_dev_summary(evaluator.last_encoded, evaluator.pairs, title, Path(scratch) / "evaluation.png")
        save_model_folder(trainer, model_dir, card, results, merge=model_args.merge_lora, figure=figure)
    logger.info("Final model saved to %s", model_dir)
    if failed is not None:
        unset = "its search score's λ and entailment score's α and threshold may be unset"
        kind = next((kind for kind in (FileNotFoundError, ValueError) if isinstance(failed, kind)), RuntimeError)
        raise kind(f"the trained model is saved in {model_dir}, but {unset}: {failed}") from failed
    if push:
        args = training_args
        url = push_model_folder(model_dir, args.hub_model_id, args.hub_token, args.hub_private_repo)
        logger.info("Pushed %s: %s", model_dir, url)
    return model_dir


def build_trainer(
    model_args: ModelArguments, data_args: DataArguments, training_args: GaussCSETrainingArguments, fixed: dict
) -> tuple[GaussCSETrainer, DataStats]:
    """The [`GaussCSETrainer`] of the run (data read, cut and tokenised; evaluator, tokenizer and model built) and the
    data's stats; ``fixed``: the [`run_arguments`] recorded with each checkpoint."""
    spec = DataSpec(
        train_datasets=data_args.train_datasets or (),
        train_files=data_args.train_file or (),
        dataset_names=data_args.dataset_name or (),
        dataset_config_names=data_args.dataset_config_name or (),
        train_split=data_args.train_split,
        data_dir=data_args.data_dir,
        shape=data_args.data_shape,
        columns=data_args.column_overrides,
        repeats=data_args.repeats,
    )
    examples, data_stats = load_training_examples(spec, drop_bad_rows=data_args.drop_bad_rows)
    if data_args.max_train_examples is not None:
        examples = examples.select(range(min(data_args.max_train_examples, len(examples))))
        data_stats.cut_to(examples)  # the card and train_results.json count what is trained on
    evaluator = build_evaluator(data_args, training_args)  # its data read now: a bad file stops before training
    name = model_args.model_name_or_path
    tokenizer = AutoTokenizer.from_pretrained(name, trust_remote_code=model_args.trust_remote_code)
    base_dir = Path(training_args.output_dir) if training_args.should_save else None  # one process writes a new base
    model = build_model(model_args, tokenizer, base_dir)
    if training_args.loss == "simcse" and model.config.frozen_mean:
        raise ValueError(
            "--loss simcse with a frozen_mean model (its μ is frozen): nothing would train; pass --frozen_mean false"
        )
    model.config.point_embeddings = training_args.loss == "simcse"
    model.get_tokenizer(tokenizer)  # its saves (checkpoints, the final folder) write this one, not a reloaded copy
    encoder_config = model.config.encoder_config
    max_length = resolve_max_length(tokenizer, encoder_config, data_args.max_seq_length)
    if max_length < data_args.max_seq_length:
        logger.warning("--max_seq_length %d is above the encoder's limit: %d", data_args.max_seq_length, max_length)
    with training_args.main_process_first(desc="tokenizing the training examples"):
        cache_dir = data_args.data_cache_dir or Path(datasets.config.HF_DATASETS_CACHE) / "gausscse"
        num_proc = data_args.preprocessing_num_workers
        train_dataset = tokenize_examples(examples, tokenizer, max_length, cache_dir=cache_dir, num_proc=num_proc)
    pack = data_args.pack_sequences
    collator = TripletCollator.for_tokenizer(
        tokenizer,
        encoder_config,
        with_contradictions=uses_contradictions(training_args.loss),
        pack=packs_by_default(training_args.device, encoder_config) if pack is None else pack,
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
    chooses = evaluator is not None and not model.config.point_embeddings  # the end-of-training choices of λ and α
    sentences = functools.partial(choice_sentences, data_args, evaluator) if chooses else None
    trainer.add_callback(JobEstimateCallback(sentences, functools.partial(encode_now, trainer, data_args)))
    return trainer, data_stats


def choice_pairs(data_args: DataArguments, evaluator) -> list:
    """The dev pairs the end-of-training choice of α and the threshold is made on: the labelled rows of
    ``--validation_file`` where one is given (a user's own data serves every choice), else SNLI dev and LingNLI
    validation from the data folder (their first ``--selection_max_examples`` pairs)."""
    from gausscse.evaluation.entailment_weight import dev_pairs

    if evaluator.name == "validation":
        return [evaluator.pairs]
    return dev_pairs(data_args.data_dir, max_examples=data_args.selection_max_examples)


def choice_sentences(data_args: DataArguments, evaluator) -> list[str]:
    """The distinct dev sentences the end-of-training choices encode ([`choose_scores`])."""
    from gausscse.evaluation.encoders import unique_sentences

    return unique_sentences(sentence for split in choice_pairs(data_args, evaluator) for sentence in split.sentences)


def encode_now(trainer: GaussCSETrainer, data_args: DataArguments, sentences: list[str]) -> None:
    """Encode ``sentences`` with the model as it is mid-training (in eval mode for it, its mode kept)."""
    model = trainer.accelerator.unwrap_model(trainer.model)
    training = model.training
    model.eval()
    try:
        model.encode(sentences, max_length=data_args.eval_max_seq_length)
    finally:
        model.train(training)


def model_card_fields(model_args, data_args, trainer: GaussCSETrainer, metrics: dict, data_stats: DataStats) -> dict:
    """The keyword arguments of the final model's card (``render_model_card``) for this run."""
    training_args = trainer.args
    return {
        "model_name": training_args.hub_model_id or Path(training_args.output_dir).name,
        "load_name": training_args.hub_model_id or str(training_args.output_dir),  # what the card's snippets load
        "base_model": model_args.model_name_or_path,
        "datasets": [*(data_args.train_datasets or ()), *(data_args.dataset_name or ())],  # the card names Hub ids
        "metrics": {name.removeprefix("eval_"): value for name, value in metrics.items()},
        "training_arguments": {  # the card's training-setup table picks its settings from these
            **dataclasses.asdict(model_args),
            **dataclasses.asdict(data_args),
            **training_args.to_sanitized_dict(),
            **{name: getattr(trainer.model.config, name) for name in MODEL_FIELDS},  # as the model resolved them
            "start": resolved_start(model_args.start, trainer.model.config),
            "world_size": training_args.world_size,
            "retrieval_weight": getattr(trainer.loss_fn, "retrieval_weight", None),  # as the loss used it
            "pack_sequences": trainer.data_collator.pack,  # as the collator packed (unset: by device)
        },
        "data_stats": data_stats.as_dict(),
    }


def resolved_start(start: str, config) -> str:
    """What ``--start`` set up, as the model's config shows it: ``"backbone"`` (the backbone's own embedding as μ,
    identity μ head) or ``"paper"`` (fresh heads); under ``"auto"``, which of the two it chose."""
    ran = "backbone" if config.head_init == "identity" else "paper"
    return ran if start != "auto" else f"{ran} (auto)"


def choose_scores(trainer: GaussCSETrainer, data_args: DataArguments) -> dict:
    """At the end of training, on dev data: λ of the search score ([`set_search_kl_weight`]) and α and the threshold
    of the entailment score ([`choose_entailment_score`]), set in the model's config; each distinct dev sentence is
    encoded once for both. Returns what to report (``{}`` without evaluation or for a point encoder)."""
    from gausscse.evaluation.encoders import GaussianEncoder
    from gausscse.evaluation.tasks import retrieval_set
    from gausscse.model.gaussian import KL_REDUCTIONS

    model, evaluator = trainer.model, trainer.evaluator
    if model.config.point_embeddings:
        return {}
    if evaluator is None:
        logger.warning(
            "evaluation is off (--eval_strategy no): the search score's λ and the entailment score's α and threshold "
            "are not chosen (the model ranks by its similarity); choose them later on dev data with "
            "`python -m gausscse.evaluation.entailment_weight --model OUTPUT_DIR`"
        )
        return {}
    entailment_pairs = choice_pairs(data_args, evaluator)
    search_pairs = None
    if model.config.similarity_reduction in KL_REDUCTIONS:
        search_pairs = evaluator.pairs
        if evaluator.name == "snli_dev":  # the pairs the entailment score is chosen on too
            search_pairs = entailment_pairs[0]
    retrieval = None if search_pairs is None else retrieval_set(search_pairs)
    sentences = [sentence for split in entailment_pairs for sentence in split.sentences]
    sentences += [] if retrieval is None else retrieval.sentences
    sets = ", ".join(f"{split.name} ({len(split.premises):,} pairs)" for split in entailment_pairs)
    logger.info(
        "Choosing λ and α at the end of training: encoding %s distinct sentences of %s",
        f"{len(set(sentences)):,}", sets,
    )  # fmt: skip
    encoder = GaussianEncoder(model, max_length=data_args.eval_max_seq_length)
    encoded = encoder.encode_unique(sentences, show_progress_bar=True)
    results = {}
    if retrieval is not None:
        results |= set_search_kl_weight(model, evaluator.name, retrieval, len(search_pairs), encoded)
    return results | choose_entailment_score(model, entailment_pairs, data_args, encoded)


def set_search_kl_weight(model, dev_name: str, retrieval, dev_pairs: int, encoded) -> dict:
    """Choose λ of the model's search score on a dev set's entailment retrieval (its sentences in ``encoded``), set
    ``config.search_kl_weight`` and return the metrics to report."""
    from gausscse.evaluation.search_weight import choose_kl_weight

    weight, curve = choose_kl_weight(model, retrieval, encoded=encoded)
    model.config.search_kl_weight = weight
    logger.info(
        "search score cos − λ·KL/d: λ = %g (%s retrieval nDCG@10 %.2f; cosine %.2f)",
        *(weight, dev_name, curve[weight], curve[0.0]),
    )
    return {
        "search_kl_weight": weight,
        "search_dev_pairs": dev_pairs,  # the dev pairs λ was chosen on (--selection_max_examples)
        f"{dev_name}_search_ndcg@10": curve[weight],
        f"{dev_name}_cosine_ndcg@10": curve[0.0],
    }


def choose_entailment_score(model, pairs, data_args: DataArguments, encoded) -> dict:
    """Choose the entailment score binary NLI decides by (α and the threshold, set in the model's config) on SNLI dev
    and LingNLI validation (their sentences in ``encoded``), and return what to report."""
    from gausscse.evaluation.entailment_weight import set_entailment_score

    return set_entailment_score(model, pairs, max_length=data_args.eval_max_seq_length, encoded=encoded)


def run() -> None:
    """``gausscse-train``: an error in the input (flags, data, an impossible push, a held --output_dir: ValueError,
    FileNotFoundError, FileExistsError) ends it with one line and exit status 2, without a traceback."""
    try:
        main(sys.argv[1:])
    except (ValueError, FileNotFoundError, FileExistsError) as error:
        print(f"gausscse-train: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    run()
