"""``SentenceIndex``: a corpus of sentences, encoded by a GaussCSE model and searchable by entailment."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gausscse.io import atomic_folder, json_lines, json_value, read_folder, write_json
from gausscse.model.gaussian import GaussianEmbeddings
from gausscse.model.utils_gausscse import model_fingerprint
from gausscse.search.index import SETTINGS_FILE, GaussianIndex

SENTENCES_FILE = "sentences.jsonl"
CORPUS_FILE = "corpus.json"
SCORES = ("auto", "search", "similarity")  # what a corpus index ranks by (SentenceIndex.build's ``score``)


class ModelMismatchError(ValueError):
    """A [`SentenceIndex`] searched with another model than the one that built it."""


@dataclass(frozen=True)
class Hit:
    """One search result: the sentence, its id (position in the corpus) and its score."""

    id: int
    sentence: str
    score: float


class SentenceIndex:
    """A [`GaussianIndex`] over a corpus, with the sentences kept beside it (a database index keeps them in its
    database: a hit's sentence is read from there) and the model's name remembered.

    Example::

        model = AutoModel.from_pretrained("outputs/quickstart", trust_remote_code=True)
        corpus = SentenceIndex.build(model, premises, show_progress_bar=True)
        for hit in corpus.entailing(model, ["A man is playing music."], k=5)[0]:
            print(f"{hit.score:.3f}  {hit.sentence}")  # premises that entail the claim, by sim(claim‖premise)
        corpus.save("premises-index")
    """

    def __init__(
        self,
        index: GaussianIndex,
        sentences: Sequence[str] | None,
        model_name: str | None = None,
        model_fingerprint: str | None = None,
    ):
        """``sentences``: one per stored Gaussian; ``None`` for a database index, whose database holds them."""
        if sentences is None and not index.engine.database:
            raise ValueError(f"sentences are needed: the {index.backend!r} index does not store them")
        if sentences is not None and len(index) != len(sentences):
            raise ValueError(f"the index holds {len(index)} Gaussians but {len(sentences)} sentences were given")
        self.index = index
        self.sentences = None if index.engine.database else list(sentences)  # nothing per item for a database
        self.model_name = model_name
        self.model_fingerprint = model_fingerprint

    def __len__(self) -> int:
        return len(self.index) if self.sentences is None else len(self.sentences)

    def sentences_of(self, ids: Sequence[int]) -> list[str | None]:
        """The stored sentences of the items ``ids`` (from the database for a database index)."""
        if self.sentences is None:
            return self.index.engine.sentences(ids)
        return [self.sentences[item] for item in ids]

    @classmethod
    def build(
        cls,
        model,
        sentences: Sequence[str],
        *,
        backend: str = "torch",
        batch_size: int = 64,
        max_length: int | None = None,
        show_progress_bar: bool = True,
        score: str = "auto",
        embeddings: GaussianEmbeddings | None = None,
        **index_kwargs: Any,
    ) -> SentenceIndex:
        """Encode ``sentences`` with ``model`` and index them with its reduction, ranked by ``score``: ``"search"``:
        the search score of the model's ``config.search_kl_weight`` (which it must state), ``"similarity"``: the
        similarity, ``"auto"``: the search score if the model states one. ``embeddings``: the sentences' Gaussians if
        encoded elsewhere (``encode_on_ray``), checked against the sentences and the model. ``index_kwargs`` go to
        [`GaussianIndex`]."""
        config = model.config
        index = cls.empty_index(model, backend=backend, score=score, **index_kwargs)
        if embeddings is None:
            embeddings = model.encode(
                list(sentences), batch_size=batch_size, max_length=max_length, show_progress_bar=show_progress_bar
            )
        elif embeddings.mu.shape != (len(sentences), config.embedding_size):
            raise ValueError(
                f"embeddings must hold one Gaussian of dimension {config.embedding_size} per sentence "
                f"({len(sentences)}), got shape {tuple(embeddings.mu.shape)}"
            )
        index.add(embeddings, list(sentences) if index.engine.database else None)  # a database keeps them too
        return cls.of_model(model, index, None if index.engine.database else sentences)

    @staticmethod
    def empty_index(model, *, backend: str = "torch", score: str = "auto", **index_kwargs: Any) -> GaussianIndex:
        """A new, empty [`GaussianIndex`] for ``model``'s Gaussians, ranked by ``score`` (as [`build`] says)."""
        weight = getattr(model.config, "search_kl_weight", None)
        if score not in SCORES:
            raise ValueError(f"score must be one of {SCORES}, got {score!r}")
        if score == "search" and weight is None:
            hint = "training sets it; `python -m gausscse.evaluation.search_weight --model DIR`"
            raise ValueError(f"score='search' needs a model whose config states search_kl_weight ({hint})")
        weight, config = None if score == "similarity" else weight, model.config
        dim, reduction = config.embedding_size, config.similarity_reduction
        return GaussianIndex(dim, reduction, backend, kl_weight=weight, **index_kwargs)

    @classmethod
    def of_model(cls, model, index: GaussianIndex, sentences: Sequence[str] | None) -> SentenceIndex:
        """The corpus index of ``index`` (filled by ``model``'s Gaussians; ``sentences``: ``None`` for a database),
        remembering the model's name (a folder made absolute, so it loads from anywhere) and fingerprint."""
        name = getattr(model, "name_or_path", None) or None
        name = str(Path(name).resolve()) if name is not None and Path(name).exists() else name
        return cls(index, sentences, name, model_fingerprint(model))

    def check_model(self, model, allow_model_mismatch: bool = False) -> None:
        """[`ModelMismatchError`] unless ``model`` has the [`model_fingerprint`] of the model that built the index (if
        it recorded one), checked at every search (``model_fingerprint`` caches it until the weights change)."""
        if allow_model_mismatch or self.model_fingerprint is None:
            return
        fingerprint = model_fingerprint(model)
        if fingerprint != self.model_fingerprint:
            raise ModelMismatchError(
                f"this index was built with {self.model_name} (fingerprint {self.model_fingerprint[:12]}), not with "
                f"{getattr(model, 'name_or_path', None) or 'this model'} (fingerprint {fingerprint[:12]}): search with "
                "the index's model, rebuild the index, or pass allow_model_mismatch=True (--allow_model_mismatch)"
            )

    def _search(self, direction: str, model, texts, k: int, batch_size: int, allow_model_mismatch: bool):
        self.check_model(model, allow_model_mismatch)
        scores, ids = getattr(self.index, direction)(model.encode(list(texts), batch_size=batch_size), k)
        found = sorted({item for row in ids.tolist() for item in row if item >= 0})
        text = dict(zip(found, self.sentences_of(found), strict=True))
        return [
            [Hit(item, text[item], score) for score, item in zip(*row, strict=True) if item >= 0]
            for row in zip(scores.tolist(), ids.tolist(), strict=True)
        ]

    def entailing(
        self, model, claims: Sequence[str], k: int, batch_size: int = 64, *, allow_model_mismatch: bool = False
    ) -> list[list[Hit]]:
        """For each claim, the k stored sentences that best entail it (highest sim(claim‖sentence) first)."""
        return self._search("entailing", model, claims, k, batch_size, allow_model_mismatch)

    def entailed_by(
        self, model, premises: Sequence[str], k: int, batch_size: int = 64, *, allow_model_mismatch: bool = False
    ) -> list[list[Hit]]:
        """For each premise, the k stored sentences it best entails (highest sim(sentence‖premise) first)."""
        return self._search("entailed_by", model, premises, k, batch_size, allow_model_mismatch)

    def save(self, folder: str | Path) -> None:
        """The index's files, ``sentences.jsonl`` (a JSON string per line; not for a database index, whose database
        holds them) and ``corpus.json`` (the model's path or Hub id and fingerprint), with ``manifest.json``; written
        beside ``folder`` and moved in (``gausscse.io.atomic_folder``)."""
        with atomic_folder(folder, SETTINGS_FILE) as staging:
            self.index.write_files(staging)
            if self.sentences is not None:
                lines = "".join(json.dumps(sentence, ensure_ascii=False) + "\n" for sentence in self.sentences)
                (staging / SENTENCES_FILE).write_text(lines, encoding="utf-8")
            corpus = {"model": self.model_name, "model_fingerprint": self.model_fingerprint, "sentences": len(self)}
            write_json(staging / CORPUS_FILE, corpus)

    @classmethod
    def load(cls, folder: str | Path, **load_kwargs: Any) -> SentenceIndex:
        """A corpus index saved by [`save`], read as [`GaussianIndex.load`] reads (``load_kwargs``: ``device``)."""
        folder = Path(folder)
        files = read_folder(folder, "SentenceIndex")
        sentences_file = files.pop(SENTENCES_FILE, None)
        corpus = json_value(files[CORPUS_FILE], folder / CORPUS_FILE) if CORPUS_FILE in files else {}
        index = GaussianIndex.from_files(folder, files, **load_kwargs)
        if index.engine.database:  # the sentences are in the database (a sentences.jsonl of older saves: not read)
            return cls(index, None, corpus.get("model"), corpus.get("model_fingerprint"))
        if sentences_file is None:
            raise FileNotFoundError(f"{folder} is not a saved SentenceIndex: {SENTENCES_FILE} is missing")
        sentences = list(json_lines(sentences_file, folder / SENTENCES_FILE, str))
        if len(sentences) != len(index):
            raise ValueError(f"{folder / SENTENCES_FILE} holds {len(sentences)} sentences, the index {len(index)}")
        return cls(index, sentences, corpus.get("model"), corpus.get("model_fingerprint"))
