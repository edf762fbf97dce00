"""Encoding a corpus on a Ray cluster with Ray Data: one GaussCSE model per worker, the Gaussians back in input order
(``encode_on_ray``), or written by the workers into a database index (``write_on_ray``). Ray is optional
(``pip install "gausscse[ray]"``), imported only when a function here runs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gausscse.io import first_line
from gausscse.loading import load_model
from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH, check_sentences
from gausscse.model.gaussian import GaussianEmbeddings

TEXT_COLUMN = "text"  # the sentences' column of the batches GaussianEncoder reads
ROW_COLUMN = "row"  # encode_on_ray's position of each sentence in the input, to put the Gaussians back in order


class GaussianEncoder:
    """A ``ray.data.Dataset.map_batches`` class (``batch_format="numpy"``): each worker loads the model at
    ``model_path`` (a Hub id, or a folder every worker sees) once, on ``device`` (default the CPU), and turns a batch's
    ``text_column`` into ``mean`` and ``logvar`` (float32, (rows, d)), every other column (an id to join on) kept."""

    def __init__(
        self,
        model_path: str,
        *,
        text_column: str = TEXT_COLUMN,
        batch_size: int = 64,
        max_length: int | None = DEFAULT_MAX_LENGTH,
        device: str | None = None,
    ):
        self.model = load_model(model_path, device=device)
        self.text_column = text_column
        self.batch_size = batch_size
        self.max_length = max_length

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The batch's Gaussians, its other columns kept; ``TypeError`` naming a row (by those columns) whose text
        is not a string."""
        others = {name: values for name, values in batch.items() if name != self.text_column}
        sentences = batch[self.text_column].tolist()
        for position, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                row = {name: values.tolist()[position] for name, values in others.items()}
                raise TypeError(
                    f"the {self.text_column!r} of row {row} is not a string: {type(sentence).__name__} {sentence!r}"
                )
        embeddings = self.model.encode(sentences, batch_size=self.batch_size, max_length=self.max_length)
        return {**others, "mean": embeddings.mu.numpy(), "logvar": embeddings.logvar.numpy()}


class GaussianWriter(GaussianEncoder):
    """A ``map_batches`` class like [`GaussianEncoder`] that writes where it encodes: each worker opens the database
    index (``backend``, ``uri``: a table or collection every worker reaches) once and writes each batch's Gaussians and
    sentences as the rows ``first_id + row`` (the sentences' input positions, reserved by [`write_on_ray`]), over any
    rows of those ids: a batch Ray runs again writes the same rows, never a second copy. Returns only ``written`` (the
    batch's row count): no Gaussian travels back to the driver."""

    def __init__(self, model_path: str, *, backend: str, uri: str, first_id: int, **encoder_kwargs):
        super().__init__(model_path, **encoder_kwargs)
        from gausscse.search.index import GaussianIndex

        self.index = GaussianIndex.open(backend, uri)
        self.first_id = first_id

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        encoded = super().__call__(batch)
        sentences = batch[self.text_column].tolist()
        gaussians = GaussianEmbeddings(torch.from_numpy(encoded["mean"]), torch.from_numpy(encoded["logvar"]))
        self.index.engine.put(self.first_id + batch[ROW_COLUMN], gaussians, sentences)
        return {"written": np.array([len(sentences)], dtype=np.int64)}


def start_ray(address: str | None, num_workers: int):
    """Ray, joined at ``address`` (``None``: ``RAY_ADDRESS``'s, else a new local Ray of ``num_workers`` CPUs; a
    process that already called ``ray.init`` keeps its Ray); ``ImportError`` without Ray Data, ``ValueError`` for no
    cluster at the address."""
    try:
        import ray
        import ray.data  # Ray Data is a separate part of the ray package (ray[data])
    except ImportError as error:
        raise ImportError(f'encoding on Ray needs Ray Data ({error}): pip install "gausscse[ray]"') from error
    if not ray.is_initialized() and address is None and "RAY_ADDRESS" not in os.environ:
        ray.init(num_cpus=num_workers, include_dashboard=False)  # a new local Ray
    elif not ray.is_initialized():
        try:
            ray.init(address=address)
        except ConnectionError as error:  # no cluster at that address (also 'auto' with none running)
            where = address or os.environ.get("RAY_ADDRESS")
            raise ValueError(
                f"no Ray cluster at {where!r} ({first_line(error)}); leave the address out for a local "
                "Ray, or start one (ray start --head)"
            ) from None
    return ray


def mapped_on_ray(
    worker: type[GaussianEncoder],
    worker_kwargs: dict,
    model_path: str | Path,
    sentences: Sequence[str],
    *,
    address: str | None = None,
    num_workers: int = 2,
    batch_size: int = 64,
    max_length: int | None = DEFAULT_MAX_LENGTH,
    rows_per_task: int = 1024,
    num_gpus: float = 0.0,
):
    """The Ray Dataset of ``sentences`` (with their input ``row``) mapped by ``worker`` actors (``worker_kwargs``
    beside the model's), each loading the model at ``model_path`` (a Hub id, or a folder every node sees) once.

    ``address``: the cluster to join (``"auto"``, ``"ray://head:10001"``; ``None``: ``RAY_ADDRESS``'s, else a new
    local Ray of ``num_workers`` CPUs; a process that already called ``ray.init`` keeps its Ray). ``num_workers``:
    Ray actors, a model each; ``batch_size`` / ``max_length``: ``model.encode``'s; ``rows_per_task``: sentences per
    Ray block and worker call; ``num_gpus``: each worker's GPUs (its model then on ``cuda``). ``ImportError`` without
    Ray Data, ``ValueError`` for no sentences, ``TypeError`` for a row that is not a string (named by its position)."""
    sentences = check_sentences("sentences", sentences)
    if not sentences:
        raise ValueError("no sentences to encode: the corpus is empty")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers (--ray_workers) must be a whole number >= 1, got {num_workers!r}")
    ray = start_ray(address, num_workers)
    import pyarrow

    table = pyarrow.table({ROW_COLUMN: np.arange(len(sentences)), TEXT_COLUMN: sentences})
    blocks = [table.slice(start, rows_per_task) for start in range(0, len(sentences), rows_per_task)]
    encoder = {
        "model_path": str(Path(model_path).resolve()) if Path(model_path).exists() else str(model_path),
        "batch_size": batch_size,
        "max_length": max_length,
        "device": "cuda" if num_gpus else None,
        **worker_kwargs,
    }
    return ray.data.from_arrow(blocks).map_batches(
        worker,
        fn_constructor_kwargs=encoder,
        compute=ray.data.ActorPoolStrategy(size=min(num_workers, len(blocks))),
        batch_size=rows_per_task,
        batch_format="numpy",
        num_gpus=num_gpus,
    )


def encode_on_ray(model_path: str | Path, sentences: Sequence[str], **ray_options: Any) -> GaussianEmbeddings:
    """The float32 Gaussians of ``sentences``, in input order, as ``model.encode(sentences)`` gives them (up to
    float32 rounding), encoded on Ray by the model at ``model_path``; ``ray_options``: [`mapped_on_ray`]'s
    (``address``, ``num_workers``, ``batch_size``, ``max_length``, ``rows_per_task``, ``num_gpus``). To fill a database
    index without the Gaussians passing through this process: [`write_on_ray`]."""
    gaussians = mapped_on_ray(GaussianEncoder, {}, model_path, sentences, **ray_options)
    batches = list(gaussians.iter_batches(batch_format="numpy", batch_size=None))
    rows = np.concatenate([batch[ROW_COLUMN] for batch in batches])
    order = np.argsort(rows, kind="stable")
    if not np.array_equal(rows[order], np.arange(len(sentences))):
        raise RuntimeError(f"Ray returned {len(rows)} Gaussians for {len(sentences)} sentences, not one per sentence")
    mean, logvar = (
        torch.from_numpy(np.concatenate([batch[name] for batch in batches])[order]) for name in ("mean", "logvar")
    )
    return GaussianEmbeddings(mean, logvar).check("encode_on_ray")


def write_on_ray(model_path: str | Path, sentences: Sequence[str], backend: str, uri: str, **ray_options: Any) -> int:
    """Encode ``sentences`` on Ray (as [`encode_on_ray`], the same ``ray_options``) and have each worker write its
    batches, with their sentences, into the database index at ``uri`` (``backend``: a database backend every worker
    reaches, e.g. a server or a local PostgreSQL, its table already made, e.g. by ``GaussianIndex(..., backend,
    uri=uri)``); only row counts come back. Sentence i becomes row ``len(index) + i``: this process holds the index's
    write lock meanwhile, and the rows become visible once the table holds exactly one per sentence (counted in the
    table: a batch Ray retried is written over itself). Returns the rows written."""
    from gausscse.search.index import GaussianIndex

    sentences = check_sentences("sentences", sentences)
    engine = GaussianIndex.open(backend, uri).engine
    with engine.reserved(len(sentences)) as first_id:
        worker_kwargs = {"backend": backend, "uri": uri, "first_id": first_id}
        written = mapped_on_ray(GaussianWriter, worker_kwargs, model_path, sentences, **ray_options)
        for _ in written.iter_batches(batch_format="numpy", batch_size=None):
            pass  # the row counts: the table's own count is what reserved() checks
    return len(sentences)
