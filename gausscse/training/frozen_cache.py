"""The frozen part of a training step, once per distinct sentence: the hidden states entering a model's first trained
layer (and a frozen μ) are the same every time a sentence comes back, so [`FrozenStateCache`] keeps them and a step
runs only the trained layers (``GaussCSEModel.cached_from``, ``frozen_part``, ``forward(frozen_states=...)``)."""

from __future__ import annotations

import logging
import os

import torch

from gausscse.model.encoding_gausscse import pad_token_ids, position_offset

from .batch import pack_sentences

logger = logging.getLogger(__name__)

GIB = 2**30
DEFAULT_CACHE_GIB = 8.0  # the automatic size's ceiling; a quarter of the machine's memory below it


def default_cache_bytes() -> int:
    """The automatic size of the cache: a quarter of the machine's memory, at most ``DEFAULT_CACHE_GIB``."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(min(DEFAULT_CACHE_GIB * GIB, memory / 4))


def sentence_tokens(inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where each sentence of a padded or packed batch lies: the flat token positions of its tokens, sentence after
    sentence (in index order), each sentence's token count, and its token ids there (``positions``, ``counts``,
    ``token_ids``). Packed: ``sentence_index``; padded: one sentence per row, its ``attention_mask``."""
    if "sentence_index" in inputs:
        owner = inputs["sentence_index"].flatten()
        sentences = int(owner.max()) + 1 if bool((owner >= 0).any()) else 0
    else:
        mask = inputs["attention_mask"].bool()
        rows = torch.arange(mask.shape[0], device=mask.device)[:, None].expand_as(mask)
        owner, sentences = torch.where(mask, rows, -1).flatten(), mask.shape[0]
    present = (owner >= 0).nonzero().squeeze(1)
    positions = present[torch.argsort(owner[present], stable=True)]
    counts = torch.bincount(owner[present], minlength=sentences)
    return positions, counts, inputs["input_ids"].flatten()[positions]


class FrozenStateCache:
    """The frozen part of a model (``GaussCSEModel.frozen_part``) per distinct sentence (its token ids), kept up to
    ``max_bytes``; past that, new sentences are computed per step as without a cache. [`inputs_for`] gives a batch's
    ``frozen_states`` / ``frozen_mu`` for the model's forward: the same Gaussians as the full forward (the frozen
    layers run in eval mode either way), from sentences computed once.

    Example::

        cache = FrozenStateCache(max_bytes=4 * 2**30)
        outputs = model(**inputs, **cache.inputs_for(model, inputs))
    """

    def __init__(self, max_bytes: int):
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.max_bytes = max_bytes
        self.entries: dict[bytes, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.stored_bytes = 0
        self.hits = 0
        self.computed = 0

    def __len__(self) -> int:
        return len(self.entries)

    def compute(self, model, token_ids: list[list[int]], inputs: dict[str, torch.Tensor]) -> list[tuple]:
        """``model.frozen_part`` of sentences laid out as ``inputs`` is (packed rows of its length, or padded)."""
        encoder_config = model.config.encoder_config
        if "sentence_index" in inputs:
            features = pack_sentences(token_ids, inputs["input_ids"].shape[1], position_offset(encoder_config))
        else:
            pad = encoder_config.pad_token_id or 0
            features = pad_token_ids(token_ids, pad, "token_type_ids" in inputs)
        features = {name: value.to(inputs["input_ids"].device) for name, value in features.items()}
        states, mu = model.frozen_part(**features)
        positions, counts, _ = sentence_tokens(features)
        per_sentence = states.flatten(0, 1)[positions].split(counts.tolist())
        return [(sentence, None if mu is None else mu[index]) for index, sentence in enumerate(per_sentence)]

    def inputs_for(self, model, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
        """``frozen_states`` ``(R, L, h)`` and ``frozen_mu`` ``(S, d)`` or ``None`` of a batch of model inputs."""
        positions, counts, token_ids = sentence_tokens(inputs)
        sentences = [ids.cpu().numpy().tobytes() for ids in token_ids.split(counts.tolist())]
        missing = list(dict.fromkeys(key for key in sentences if key not in self.entries))
        self.hits += len(sentences) - len(missing)
        found = {}
        if missing:
            ids = [torch.frombuffer(bytearray(key), dtype=torch.long).tolist() for key in missing]
            for key, entry in zip(missing, self.compute(model, ids, inputs), strict=True):
                found[key] = entry
                size = sum(tensor.numel() * tensor.element_size() for tensor in entry if tensor is not None)
                if self.stored_bytes + size <= self.max_bytes:
                    self.entries[key] = (entry[0].clone(), None if entry[1] is None else entry[1].clone())
                    self.stored_bytes += size
            self.computed += len(missing)
        entries = [found.get(key) or self.entries[key] for key in sentences]
        flat = torch.cat([states for states, _ in entries])
        shape = (*inputs["input_ids"].shape, flat.shape[-1])
        hidden = flat.new_zeros(shape).flatten(0, 1).index_copy(0, positions, flat).view(shape)
        mu = None if entries[0][1] is None else torch.stack([mu for _, mu in entries])
        return {"frozen_states": hidden, "frozen_mu": mu}

    def summary(self) -> str:
        """Sentences kept, their size, and how many sentences of the steps came from the cache."""
        seen = self.hits + self.computed
        share = 100 * self.hits / seen if seen else 0.0
        return (
            f"{len(self)} sentences kept ({self.stored_bytes / GIB:.2f} GiB of {self.max_bytes / GIB:.2f}); "
            f"{self.computed} computed, {self.hits} reused ({share:.1f} % of the steps' sentences)"
        )
