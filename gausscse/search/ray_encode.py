"""Encoding a corpus on a Ray cluster with Ray Data: one GaussCSE model per worker, the Gaussians back in input order.

    embeddings = encode_on_ray("outputs/quickstart", sentences, num_workers=8)  # a local Ray, 8 CPUs
    embeddings = encode_on_ray("user/gausscse-minilm", sentences, address="auto", num_workers=32, num_gpus=1)

[`GaussianEncoder`] is the ``Dataset.map_batches`` class (usable on any Ray dataset with a text column: every other
column, an id for instance, passes through); [`encode_on_ray`] runs it over a list of sentences and returns one
[`GaussianEmbeddings`], as ``model.encode`` would. Ray is an optional dependency (``pip install "gausscse[ray]"``),
imported only when a function here runs. The model must load on every worker: a Hub id, or a folder every node sees.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from gausscse.loading import load_model
from gausscse.model.encoding_gausscse import DEFAULT_MAX_LENGTH, check_sentences
from gausscse.model.gaussian import GaussianEmbeddings

TEXT_COLUMN = "text"  # the sentences' column of the batches GaussianEncoder reads
MEAN_COLUMN = "mean"  # μ of each sentence: a fixed-size float32 array column (d values)
LOGVAR_COLUMN = "logvar"  # log σ² of each sentence, the same shape
ROW_COLUMN = "row"  # encode_on_ray's position of each sentence in the input, to put the Gaussians back in order


def require_ray():
    """The ``ray`` module with Ray Data loaded; ``ImportError`` naming the extra that installs it otherwise."""
    try:
        import ray
        import ray.data  # Ray Data is a separate part of the ray package (ray[data])
    except ImportError as error:
        raise ImportError(
            f'encoding on Ray needs Ray Data, which is not installed ({error}): pip install "gausscse[ray]"'
        ) from error
    return ray


class GaussianEncoder:
    """A ``ray.data.Dataset.map_batches`` callable class: each Ray worker loads the GaussCSE model once
    ([`gausscse.loading.load_model`]) and turns each batch's ``text_column`` into μ and log σ².

    A batch (``batch_format="numpy"``: a dict of arrays) comes back without its text column, with every other column
    as it was (keep an id column to join the Gaussians with), plus ``mean`` and ``logvar``: float32 arrays of shape
    (rows, d), which Ray stores as fixed-size array columns. Example::

        gaussians = dataset.map_batches(
            GaussianEncoder,
            fn_constructor_kwargs={"model_path": "outputs/quickstart", "batch_size": 64},
            compute=ray.data.ActorPoolStrategy(size=4),
            batch_size=1024,
            batch_format="numpy",
        )
    """

    def __init__(
        self,
        model_path: str,
        *,
        text_column: str = TEXT_COLUMN,
        batch_size: int = 64,
        max_length: int | None = DEFAULT_MAX_LENGTH,
        device: str | None = None,
    ):
        """``model_path``: a model folder every worker sees, or a Hub id; ``batch_size`` and ``max_length``: the
        sentences per forward pass and the truncation of ``model.encode``; ``device``: where the model runs
        (default: the CPU; ``"cuda"`` on a worker given a GPU)."""
        self.model = load_model(model_path, device=device)
        self.text_column = text_column
        self.batch_size = batch_size
        self.max_length = max_length

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The batch's Gaussians, its other columns kept; ``TypeError`` naming the row (by those columns) whose text
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
        return {**others, MEAN_COLUMN: embeddings.mu.numpy(), LOGVAR_COLUMN: embeddings.logvar.numpy()}


def join_ray(ray, address: str | None, num_cpus: int) -> None:
    """Start or join Ray unless this process already has: the cluster at ``address`` (``"auto"``, ``ray://...``,
    or ``RAY_ADDRESS``), else a new local instance of ``num_cpus`` CPUs and no dashboard."""
    if ray.is_initialized():
        return
    if address is None and "RAY_ADDRESS" not in os.environ:
        ray.init(num_cpus=num_cpus, include_dashboard=False)
    else:
        ray.init(address=address)


def encode_on_ray(
    model_path: str | Path,
    sentences: Sequence[str],
    *,
    address: str | None = None,
    num_workers: int = 2,
    batch_size: int = 64,
    max_length: int | None = DEFAULT_MAX_LENGTH,
    rows_per_task: int = 1024,
    num_gpus: float = 0.0,
) -> GaussianEmbeddings:
    """Encode ``sentences`` with the GaussCSE model at ``model_path`` on Ray: the same float32 Gaussians, in input
    order, as ``model.encode(sentences)`` (up to float32 rounding: the workers may run other kernels).

    Args:
        model_path: a model folder (made absolute; on a cluster every node must see it) or a Hub id.
        sentences: the corpus, a list of strings.
        address: the Ray cluster to join (``"auto"``, ``"ray://head:10001"``); ``None``: the one ``RAY_ADDRESS``
            names, else a new local Ray of ``num_workers`` CPUs. A process that already called ``ray.init`` keeps
            its Ray.
        num_workers: the Ray workers (actors), each with its own copy of the model.
        batch_size, max_length: ``model.encode``'s sentences per forward pass and truncation.
        rows_per_task: sentences per Ray block and per call of a worker.
        num_gpus: the GPUs of each worker (its model then runs on ``cuda``).

    Raises:
        ImportError: Ray Data is not installed. ValueError: no sentences. TypeError: a row that is not a string
        (named by its position).
    """
    sentences = check_sentences("sentences", sentences)
    if not sentences:
        raise ValueError("no sentences to encode: the corpus is empty")
    ray = require_ray()
    import pyarrow

    join_ray(ray, address, num_workers)
    table = pyarrow.table({ROW_COLUMN: np.arange(len(sentences)), TEXT_COLUMN: sentences})
    blocks = [table.slice(start, rows_per_task) for start in range(0, len(sentences), rows_per_task)]
    local = Path(model_path).exists()
    encoder = {
        "model_path": str(Path(model_path).resolve()) if local else str(model_path),
        "batch_size": batch_size,
        "max_length": max_length,
        "device": "cuda" if num_gpus else None,
    }
    gaussians = ray.data.from_arrow(blocks).map_batches(
        GaussianEncoder,
        fn_constructor_kwargs=encoder,
        compute=ray.data.ActorPoolStrategy(size=min(num_workers, len(blocks))),
        batch_size=rows_per_task,
        batch_format="numpy",
        num_gpus=num_gpus,
    )
    return in_input_order(gaussians.iter_batches(batch_format="numpy", batch_size=None), len(sentences))


def in_input_order(batches, count: int) -> GaussianEmbeddings:
    """The Gaussians of ``batches`` (dicts with ``row``, ``mean``, ``logvar``, in any order) sorted by row, which
    must be each of 0 … ``count`` − 1 once."""
    rows, mean, logvar = [], [], []
    for batch in batches:
        rows.append(batch[ROW_COLUMN])
        mean.append(batch[MEAN_COLUMN])
        logvar.append(batch[LOGVAR_COLUMN])
    rows = np.concatenate(rows)
    order = np.argsort(rows, kind="stable")
    if not np.array_equal(rows[order], np.arange(count)):
        raise RuntimeError(f"Ray returned {len(rows)} Gaussians for {count} sentences, not one per sentence")
    return GaussianEmbeddings(
        torch.from_numpy(np.concatenate(mean)[order]), torch.from_numpy(np.concatenate(logvar)[order])
    ).check("encode_on_ray")


__all__ = ["GaussianEncoder", "encode_on_ray"]
