r"""The GaussCSE loss for sentence-transformers' ``SentenceTransformerTrainer``: the same [`GaussCSELoss`] the
``GaussCSETrainer`` computes, on the ``SentenceTransformer`` face of a GaussCSE model and a dataset of (anchor,
positive, negative) columns = (premise, entailment, contradiction).

Example::

    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
    from gausscse.training import GaussCSESentenceTransformerLoss

    model = SentenceTransformer("path/to/gausscse-model", trust_remote_code=True)
    triplets = Dataset.from_dict({"anchor": premises, "positive": entailments, "negative": contradictions})
    loss = GaussCSESentenceTransformerLoss(model, "ent+con+rev", temperature=0.05)
    SentenceTransformerTrainer(model=model, train_dataset=triplets, loss=loss).train()
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from gausscse.model.gaussian import GaussianEmbeddings

from .losses import GaussCSELoss, NLIBatchEmbeddings


def token_text_ids(features: dict[str, torch.Tensor]) -> torch.Tensor:
    """A 63-bit id per row of the tokenized column ``features``: equal ids for rows of equal tokens (the texts that
    tokenize alike are the same sentence to the loss's false-negative masks, as equal normalized texts are to
    ``GaussCSETrainer``'s)."""
    rows = features["input_ids"].cpu()
    mask = features.get("attention_mask")
    mask = torch.ones_like(rows, dtype=torch.bool) if mask is None else mask.cpu().bool()
    ids = []
    for tokens, kept in zip(rows, mask, strict=True):
        digest = hashlib.blake2b(tokens[kept].numpy().tobytes(), digest_size=8).digest()
        ids.append(int.from_bytes(digest, "little") >> 1)
    return torch.tensor(ids, dtype=torch.long, device=features["input_ids"].device)


class GaussCSESentenceTransformerLoss(nn.Module):
    r"""[`GaussCSELoss`] (eq. 3 and its extra terms) as a sentence-transformers loss: ``forward(sentence_features,
    labels)`` takes the tokenized columns (anchor, positive[, negative]); each goes through the model, whose GaussCSE
    module adds ``mu`` and ``logvar`` to the features. Without a negative column the contradiction parts are empty
    (use the ``ent`` or ``ent+rev`` variant). ``loss``: another composition of the loss modules (default:
    ``GaussCSELoss(variant, temperature, the model's similarity_reduction, frozen_mean=..., **terms)``). The keep
    term needs the starting encoder's vectors, which only ``GaussCSETrainer`` computes."""

    def __init__(
        self,
        model: Any,
        variant: str = "ent+con+rev",
        temperature: float = 0.05,
        *,
        loss: nn.Module | None = None,
        **terms: float | None,
    ):
        super().__init__()
        config = getattr(getattr(model[0], "model", None), "config", None)
        if getattr(config, "model_type", None) != "gausscse":
            found = type(model[0]).__name__
            raise ValueError(f"{type(self).__name__} needs a GaussCSE SentenceTransformer, its module is {found}")
        if terms.get("keep_weight"):
            raise ValueError("keep_weight: the keep term's targets come from GaussCSETrainer (gausscse-train) only")
        self.model = model
        self.loss = loss or GaussCSELoss(
            variant, temperature, config.similarity_reduction, frozen_mean=config.frozen_mean, **terms
        )

    def forward(self, sentence_features: Iterable[dict[str, torch.Tensor]], labels: torch.Tensor | None = None):
        columns = list(sentence_features)
        if len(columns) not in (2, 3):
            raise ValueError(f"a GaussCSE batch has 2 or 3 columns (anchor, positive, negative), got {len(columns)}")
        outputs = [self.model(features) for features in columns]
        gaussians = [GaussianEmbeddings(output["mu"], output["logvar"]) for output in outputs]
        ids = [token_text_ids(features) for features in columns]
        size = len(gaussians[0])
        if len(gaussians) == 2:  # no negatives: placeholders, masked out
            gaussians.append(gaussians[1])
            ids.append(torch.full_like(ids[1], -1))
            present = torch.zeros(size, dtype=torch.bool, device=gaussians[0].mu.device)
        else:
            present = torch.ones(size, dtype=torch.bool, device=gaussians[0].mu.device)
        batch = NLIBatchEmbeddings(*gaussians, contradiction_mask=present, text_ids=torch.stack(ids, dim=1))
        return self.loss(batch)

    def get_config_dict(self) -> dict[str, Any]:
        """What sentence-transformers writes into the model card's training section."""
        loss = self.loss
        contrastive = getattr(loss, "contrastive", None)
        config = {"loss": type(loss).__name__, **getattr(loss, "weights", {})}
        if contrastive is not None:
            config.update(variant=contrastive.variant, temperature=contrastive.temperature)
        return config

    @property
    def citation(self) -> str:
        return """@inproceedings{yoda-etal-2024-sentence,
    title = "Sentence Representations via {G}aussian Embedding",
    author = "Yoda, Shohei and Tsukagoshi, Hayato and Sasano, Ryohei and Takeda, Koichi",
    booktitle = "Proceedings of the 18th Conference of the European Chapter of the ACL",
    year = "2024",
}"""
