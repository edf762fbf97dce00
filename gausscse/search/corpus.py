"""``SentenceIndex``: a corpus of sentences, encoded by a GaussCSE model and searchable by entailment."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gausscse.io import atomic_folder, write_json
from gausscse.search.index import SETTINGS_FILE, GaussianIndex

SENTENCES_FILE = "sentences.jsonl"
CORPUS_FILE = "corpus.json"


@dataclass(frozen=True)
class Hit:
    """One search result: the stored sentence, its id (position in the corpus) and the similarity."""

    id: int
    sentence: str
    score: float


class SentenceIndex:
    """A [`GaussianIndex`] over a corpus, with the sentences kept beside it and the model's name remembered.

    Example::

        model = AutoModel.from_pretrained("outputs/quickstart", trust_remote_code=True)
        corpus = SentenceIndex.build(model, premises, show_progress_bar=True)
        for hit in corpus.entailing(model, ["A man is playing music."], k=5)[0]:
            print(f"{hit.score:.3f}  {hit.sentence}")  # premises that entail the claim, by sim(claim‖premise)
        corpus.save("premises-index")
    """

    def __init__(self, index: GaussianIndex, sentences: Sequence[str], model_name: str | None = None):
        if len(index) != len(sentences):
            raise ValueError(f"the index holds {len(index)} Gaussians but {len(sentences)} sentences were given")
        self.index = index
        self.sentences = list(sentences)
        self.model_name = model_name

    def __len__(self) -> int:
        return len(self.sentences)

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
        **index_kwargs: Any,
    ) -> SentenceIndex:
        """Encode ``sentences`` with ``model`` (a ``GaussCSEModel``) and index them with the model's reduction.

        ``index_kwargs`` go to [`GaussianIndex`] (``candidates_per_result``, ``ef_search``, ``device``).
        """
        embeddings = model.encode(
            list(sentences), batch_size=batch_size, max_length=max_length, show_progress_bar=show_progress_bar
        )
        index = GaussianIndex(model.config.embedding_size, model.config.similarity_reduction, backend, **index_kwargs)
        index.add(embeddings)
        return cls(index, sentences, model_name=getattr(model, "name_or_path", None))

    def _hits(self, scores, ids) -> list[list[Hit]]:
        return [
            [
                Hit(int(item), self.sentences[int(item)], float(score))
                for score, item in zip(row_scores, row_ids, strict=True)
                if item >= 0
            ]
            for row_scores, row_ids in zip(scores.tolist(), ids.tolist(), strict=True)
        ]

    def entailing(self, model, claims: Sequence[str], k: int, batch_size: int = 64) -> list[list[Hit]]:
        """For each claim, the k stored sentences that best entail it (highest sim(claim‖sentence) first)."""
        return self._hits(*self.index.entailing(model.encode(list(claims), batch_size=batch_size), k))

    def entailed_by(self, model, premises: Sequence[str], k: int, batch_size: int = 64) -> list[list[Hit]]:
        """For each premise, the k stored sentences it best entails (highest sim(sentence‖premise) first)."""
        return self._hits(*self.index.entailed_by(model.encode(list(premises), batch_size=batch_size), k))

    def save(self, folder: str | Path) -> None:
        """The index's files plus ``sentences.jsonl`` (one JSON string per line) and ``corpus.json``; written beside
        ``folder`` and swapped in whole."""
        with atomic_folder(folder, SETTINGS_FILE) as staging:
            self.index.write_files(staging)
            lines = "".join(json.dumps(sentence, ensure_ascii=False) + "\n" for sentence in self.sentences)
            (staging / SENTENCES_FILE).write_text(lines, encoding="utf-8")
            write_json(staging / CORPUS_FILE, {"model": self.model_name, "sentences": len(self.sentences)})

    @classmethod
    def load(cls, folder: str | Path, **load_kwargs: Any) -> SentenceIndex:
        """A corpus index saved by [`save`]."""
        folder = Path(folder)
        if not (folder / SENTENCES_FILE).is_file():
            raise FileNotFoundError(f"{folder} is not a saved SentenceIndex: {SENTENCES_FILE} is missing")
        index = GaussianIndex.load(folder, **load_kwargs)
        with open(folder / SENTENCES_FILE, encoding="utf-8") as handle:
            sentences = [json.loads(line) for line in handle]
        corpus = json.loads((folder / CORPUS_FILE).read_text(encoding="utf-8"))
        return cls(index, sentences, model_name=corpus["model"])


__all__ = ["Hit", "SentenceIndex"]
