"""Training: arguments, batches, losses, the Trainer, LoRA, the final save and the run lock (one module each); the
command is ``gausscse.cli.train``. Only the losses are imported here; import the other modules by name."""

from .losses import GAUSSCSE_VARIANTS, LOSS_NAMES, GaussCSELoss, NLIBatchEmbeddings, SupervisedSimCSELoss, build_loss

__all__ = [
    "GAUSSCSE_VARIANTS",
    "LOSS_NAMES",
    "GaussCSELoss",
    "NLIBatchEmbeddings",
    "SupervisedSimCSELoss",
    "build_loss",
]
