"""Fine-tune an encoder into a GaussCSE model on NLI data.

    accelerate launch train_gausscse.py [CONFIG.yaml|.json] [--model_name_or_path ...] [--loss ent+con+rev] ...
    python train_gausscse.py configs/quickstart.yaml

Flags after a config file override its values. The final (best) model goes to ``<output_dir>/model``: weights,
config with ``auto_map`` and the code files, tokenizer, model card ``README.md``, ``train_results.json``; it loads
with ``AutoModel.from_pretrained(path, trust_remote_code=True)`` and ``--push_to_hub --hub_model_id ...`` uploads
exactly that folder. Checkpoints stay in ``<output_dir>/checkpoint-*`` (``--resume_from_checkpoint``).
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from pathlib import Path

from transformers import AutoConfig, AutoTokenizer, set_seed

from gausscse import GaussCSEModel
from training.arguments import DataArguments, GaussCSETrainingArguments, ModelArguments, parse_arguments
from training.data import TripletCollator, load_training_examples
from training.lora import apply_lora
from training.losses import uses_contradictions
from training.output import push_model_folder, save_model_folder
from training.trainer import GaussCSETrainer

logger = logging.getLogger("train_gausscse")

FINAL_MODEL_DIR = "model"


def build_model(model_args: ModelArguments) -> GaussCSEModel:
    """A GaussCSE folder continues training; any other encoder gets fresh heads. Then LoRA or a frozen backbone."""
    config = AutoConfig.from_pretrained(model_args.model_name_or_path, trust_remote_code=True)
    if config.model_type == "gausscse":
        model = GaussCSEModel.from_pretrained(model_args.model_name_or_path)
    else:
        model = GaussCSEModel.from_backbone(
            model_args.model_name_or_path,
            pooling=model_args.pooling,
            mean_activation=model_args.mean_activation,
            similarity_reduction=model_args.similarity_reduction,
        )
    if model_args.freeze_backbone:
        model.encoder.requires_grad_(False)
    if model_args.lora_r > 0:
        apply_lora(
            model, model_args.lora_r, model_args.lora_alpha, model_args.lora_dropout, model_args.lora_target_modules
        )
    return model


PACKABLE_ENCODERS = ("bert", "roberta", "xlm-roberta")


def packing_position_offset(model: GaussCSEModel) -> int:
    """The first position id of a packed sentence: 0 for BERT, ``pad_token_id + 1`` for RoBERTa-style encoders."""
    encoder_config = model.config.encoder_config
    if encoder_config.model_type not in PACKABLE_ENCODERS:
        raise ValueError(
            f"--pack_sequences supports encoders with absolute position ids {PACKABLE_ENCODERS}, "
            f"not {encoder_config.model_type!r}; drop the flag"
        )
    return 0 if encoder_config.model_type == "bert" else encoder_config.pad_token_id + 1


def build_evaluator(data_args: DataArguments, training_args: GaussCSETrainingArguments):
    """The SNLI dev evaluator of ``evaluation.fast`` (``None`` when evaluation is off)."""
    if training_args.eval_strategy == "no":
        return None
    from evaluation.fast import SNLIDevEvaluator

    return SNLIDevEvaluator(
        data_dir=data_args.data_dir,
        max_examples=data_args.eval_max_examples,
        batch_size=training_args.per_device_eval_batch_size,
        max_length=data_args.eval_max_seq_length,
    )


def main(argv: list[str] | None = None) -> Path:
    """Parse → build → train → evaluate → save (+ card) → optional push. Returns the final model folder."""
    model_args, data_args, training_args = parse_arguments(argv)
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        level=logging.INFO if training_args.should_log else logging.WARNING,
    )
    push = training_args.push_to_hub
    training_args.push_to_hub = False  # push the final folder only, not every checkpoint
    set_seed(training_args.seed)

    train_dataset, data_stats = load_training_examples(
        data_args.train_datasets, data_args.data_dir, drop_bad_rows=data_args.drop_bad_rows
    )
    if data_args.max_train_examples is not None:
        train_dataset = train_dataset.select(range(min(data_args.max_train_examples, len(train_dataset))))
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    model = build_model(model_args)
    trainer = GaussCSETrainer(
        model=model,
        args=training_args,
        train_dataset=train_dataset,
        data_collator=TripletCollator(
            tokenizer,
            data_args.max_seq_length,
            with_contradictions=uses_contradictions(training_args.loss),
            pack=data_args.pack_sequences,
            pack_length=data_args.pack_length,
            position_offset=packing_position_offset(model) if data_args.pack_sequences else 0,
        ),
        processing_class=tokenizer,
        evaluator=build_evaluator(data_args, training_args),
    )
    train_output = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    metrics = trainer.evaluate()
    results = {
        **train_output.metrics,
        **metrics,
        # The checkpoint whose weights the final model has; None: the last step's weights.
        "best_model_checkpoint": (
            trainer.state.best_model_checkpoint if training_args.load_best_model_at_end else None
        ),
        "train_examples": len(train_dataset),
        "eval_max_examples": data_args.eval_max_examples,  # SNLI-dev pairs behind the eval_* metrics (None: all)
        "data": data_stats.as_dict(),
    }
    model_dir = Path(training_args.output_dir) / FINAL_MODEL_DIR
    if trainer.is_world_process_zero():
        card = {
            "model_name": training_args.hub_model_id or Path(training_args.output_dir).name,
            "base_model": model_args.model_name_or_path,
            "datasets": list(data_args.train_datasets),
            "metrics": {name.removeprefix("eval_"): value for name, value in metrics.items()},
            "training_arguments": {
                **dataclasses.asdict(model_args),
                **dataclasses.asdict(data_args),
                **training_args.to_sanitized_dict(),
            },
            "data_stats": data_stats.as_dict(),
        }
        save_model_folder(model, tokenizer, model_dir, card, results, merge=model_args.merge_lora)
        logger.info("Final model saved to %s", model_dir)
        if push:
            url = push_model_folder(
                model_dir, training_args.hub_model_id, training_args.hub_token, training_args.hub_private_repo
            )
            logger.info("Pushed %s: %s", model_dir, url)
    return model_dir


if __name__ == "__main__":
    main(sys.argv[1:])
