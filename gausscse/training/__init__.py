"""Training GaussCSE models: arguments, NLI data, losses (eq. 3 and supervised SimCSE), Trainer, LoRA, output, and
heads-only training on a frozen backbone's cached features (``training.heads_only``)."""

from gausscse.data.sources import DataSpec, build_examples, load_training_examples
from gausscse.data.tokenize import text_id, tokenize_examples

from .arguments import DataArguments, GaussCSETrainingArguments, ModelArguments, parse_arguments
from .batch import TripletCollator
from .losses import GAUSSCSE_VARIANTS, LOSS_NAMES, GaussCSELoss, NLIBatchEmbeddings, SupervisedSimCSELoss, build_loss
from .trainer import GaussCSETrainer

__all__ = [
    "GAUSSCSE_VARIANTS",
    "LOSS_NAMES",
    "DataArguments",
    "DataSpec",
    "GaussCSELoss",
    "GaussCSETrainer",
    "GaussCSETrainingArguments",
    "ModelArguments",
    "NLIBatchEmbeddings",
    "SupervisedSimCSELoss",
    "TripletCollator",
    "build_examples",
    "build_loss",
    "load_training_examples",
    "parse_arguments",
    "text_id",
    "tokenize_examples",
]
