"""Training: arguments, batches, losses, the Trainer, LoRA, the final save and the run lock (one module each); the
command is ``gausscse.cli.train``. Only the losses (and their sentence-transformers face) are imported here; import
the other modules by name."""

from .losses import (
    GAUSSCSE_VARIANTS,
    LOSS_NAMES,
    GaussCSEContrastiveLoss,
    GaussCSELoss,
    KeepTerm,
    NLIBatchEmbeddings,
    RetrievalTerm,
    SupervisedSimCSELoss,
    build_loss,
)
from .sentence_transformers_loss import GaussCSESentenceTransformerLoss

__all__ = [
    "GAUSSCSE_VARIANTS",
    "LOSS_NAMES",
    "GaussCSEContrastiveLoss",
    "GaussCSELoss",
    "GaussCSESentenceTransformerLoss",
    "KeepTerm",
    "NLIBatchEmbeddings",
    "RetrievalTerm",
    "SupervisedSimCSELoss",
    "build_loss",
]
