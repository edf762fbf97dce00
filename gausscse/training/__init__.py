"""Training GaussCSE models: arguments (``arguments``), the batch layout, padding and packing (``batch``), the losses
(eq. 3 and supervised SimCSE, ``losses``), the Trainer (``trainer``), the DDP gather (``distributed``), LoRA
(``lora``), the final model folder (``save``; its card: ``gausscse.hub.model_card``) and the precision pick
(``precision``). The training data itself comes from ``gausscse.data``; the command is ``gausscse.cli.train``.

Only the losses are imported here (``from gausscse.training import GaussCSELoss``); import the other modules by name.
"""

from .losses import GAUSSCSE_VARIANTS, LOSS_NAMES, GaussCSELoss, NLIBatchEmbeddings, SupervisedSimCSELoss, build_loss

__all__ = [
    "GAUSSCSE_VARIANTS",
    "LOSS_NAMES",
    "GaussCSELoss",
    "NLIBatchEmbeddings",
    "SupervisedSimCSELoss",
    "build_loss",
]
