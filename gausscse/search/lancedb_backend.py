"""The LanceDB side of ``GaussianIndex``: the Gaussians, the sentences and their inner-product vectors in an embedded
vector database (LanceDB: a folder of Lance files, no server), searched with its ``dot`` metric.

One table, ``gaussians``, one row per stored item: ``id`` (its position), ``mu`` and ``logvar`` (float32, d each),
``sentence`` (or null), and the two ``kl_feature_map`` vectors (2d + 2 values, computed in float64, stored float32):
``entailing_vector`` = B(x) and ``entailed_by_vector`` = A(x). A query q is sent as −A(q) against
``entailing_vector`` (⟨−A(q), B(x)⟩ = −KL(q‖x)) or as −B(q) against ``entailed_by_vector`` (−KL(x‖q)), so LanceDB's
``dot`` ranking (its distance is 1 − ⟨query, row⟩, smallest first) puts first the items of smallest KL: the highest
``sum`` and ``mean_kl`` similarities. The vectors are never normalised: cosine or L2 on them would rank by something
else. The table's schema metadata holds the index settings, so ``GaussianIndex.load(uri)`` reopens it.

Exact (``"lancedb"``): every query bypasses any vector index (a flat scan of the table). Approximate
(``"lancedb-ann"``): LanceDB's own IVF index on both vector columns (``IVF_FLAT``, ``dot`` metric: k-means partitions
of the stored vectors, ``nprobes`` of them scanned per query; rows added after it was built are scanned flat by
LanceDB). Either way ``GaussianIndex`` re-scores the shortlist exactly, as for FAISS.

The same vectors and metric serve a server engine when one machine is outgrown (README: pgvector, Qdrant, Milvus).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gausscse.model.gaussian import SEARCH_DIRECTIONS, GaussianEmbeddings, kl_feature_map

LANCEDB, LANCEDB_ANN = "lancedb", "lancedb-ann"
TABLE_NAME = "gaussians"
SETTINGS_KEY = b"gausscse"
VECTOR_COLUMNS = {"entailing": "entailing_vector", "entailed_by": "entailed_by_vector"}
STORED_SIDES = {direction: sides[1] for direction, sides in SEARCH_DIRECTIONS.items()}  # the map a row stores
QUERY_SIDES = {direction: sides[0] for direction, sides in SEARCH_DIRECTIONS.items()}  # the map a query sends
QUERIES_PER_REQUEST = 256
ANN_INDEX_TYPE = "IVF_FLAT"
MIN_ROWS_PER_PARTITION = 256  # IVF partitions: √N, at least this many rows each (k-means needs data)


def lancedb_module():
    """LanceDB, imported where the LanceDB backends are used (``pip install lancedb``)."""
    try:
        import lancedb
    except ImportError as error:
        raise ImportError("the LanceDB backends need lancedb: pip install lancedb") from error
    return lancedb


def table_schema(dim: int, settings: dict[str, Any]):
    """The Arrow schema of the table, with ``settings`` (JSON) in its metadata."""
    import pyarrow as pa

    vector = pa.list_(pa.float32(), 2 * dim + 2)
    fields = [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("mu", pa.list_(pa.float32(), dim), nullable=False),
        pa.field("logvar", pa.list_(pa.float32(), dim), nullable=False),
        pa.field("sentence", pa.string()),
        *(pa.field(column, vector, nullable=False) for column in VECTOR_COLUMNS.values()),
    ]
    return pa.schema(fields, metadata={SETTINGS_KEY: json.dumps(settings).encode()})


def fixed_size_rows(values: np.ndarray):
    """A ``(N, width)`` float32 array as an Arrow fixed-size-list column."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])


def is_database(uri: str | Path) -> bool:
    """Whether the folder ``uri`` holds a GaussianIndex table (checked without opening it)."""
    return (Path(uri) / f"{TABLE_NAME}.lance").is_dir()


class LanceTable:
    """The ``gaussians`` table of a LanceDB database at ``uri``: rows in, shortlists out."""

    def __init__(self, table, uri: str):
        self.table = table
        self.uri = uri
        self._has_ann_index: bool | None = None  # asked of the database once, then kept

    @classmethod
    def create(cls, uri: str | Path, dim: int, settings: dict[str, Any]) -> LanceTable:
        """A new, empty table; ``FileExistsError`` if the database at ``uri`` already has one (reopen it with
        ``GaussianIndex.load(uri)``: nothing stored is overwritten)."""
        database = lancedb_module().connect(str(uri))
        if TABLE_NAME in database.table_names():
            raise FileExistsError(
                f"{uri} already holds a GaussianIndex table: reopen it with GaussianIndex.load({str(uri)!r}), or "
                "pass another uri"
            )
        return cls(database.create_table(TABLE_NAME, schema=table_schema(dim, settings)), str(uri))

    @classmethod
    def open(cls, uri: str | Path) -> tuple[LanceTable, dict[str, Any]]:
        """The table at ``uri`` and the settings stored with it; ``FileNotFoundError`` if there is none."""
        database = lancedb_module().connect(str(uri))
        if TABLE_NAME not in database.table_names():
            raise FileNotFoundError(f"{uri} holds no GaussianIndex table ({TABLE_NAME!r})")
        table = database.open_table(TABLE_NAME)
        metadata = table.schema.metadata or {}
        if SETTINGS_KEY not in metadata:
            raise ValueError(f"{uri}: table {TABLE_NAME!r} has no GaussianIndex settings in its schema metadata")
        return cls(table, str(uri)), json.loads(metadata[SETTINGS_KEY])

    def __len__(self) -> int:
        return self.table.count_rows()

    def append(self, embeddings: GaussianEmbeddings, first_id: int, sentences: Sequence[str] | None) -> None:
        """Rows ``first_id, first_id + 1, ...`` for ``embeddings`` (float32, checked by the index) and their
        sentences; one write (one new version of the table)."""
        import pyarrow as pa

        mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
        columns = {
            "id": pa.array(np.arange(first_id, first_id + len(mu)), pa.int64()),
            "mu": fixed_size_rows(mu.numpy()),
            "logvar": fixed_size_rows(logvar.numpy()),
            "sentence": pa.array(list(sentences) if sentences is not None else [None] * len(mu), pa.string()),
        }
        for direction, column in VECTOR_COLUMNS.items():
            columns[column] = fixed_size_rows(kl_feature_map(mu, logvar, STORED_SIDES[direction]).numpy())
        self.table.add(pa.table(columns, schema=self.table.schema))

    def read(self) -> tuple[GaussianEmbeddings, list[str | None]]:
        """Every stored Gaussian and sentence, in id order."""
        rows = self.table.to_arrow().select(["id", "mu", "logvar", "sentence"]).sort_by("id")
        ids = rows["id"].to_numpy()
        if not np.array_equal(ids, np.arange(len(ids))):
            raise ValueError(f"{self.uri}: the ids of table {TABLE_NAME!r} are not 0..{len(ids) - 1}")

        def matrix(name: str) -> torch.Tensor:
            column = rows[name].combine_chunks()
            width = column.type.list_size
            return torch.from_numpy(column.values.to_numpy(zero_copy_only=False).reshape(-1, width).copy())

        return GaussianEmbeddings(matrix("mu"), matrix("logvar")), rows["sentence"].to_pylist()

    def has_ann_index(self) -> bool:
        if self._has_ann_index is None:
            columns = {column for index in self.table.list_indices() for column in index.columns}
            self._has_ann_index = set(VECTOR_COLUMNS.values()) <= columns
        return self._has_ann_index

    def build_ann_index(self) -> None:
        """LanceDB's IVF index (``dot``) on both vector columns, √N partitions of at least
        ``MIN_ROWS_PER_PARTITION`` rows."""
        rows = len(self)
        partitions = max(1, min(int(math.sqrt(rows)), rows // MIN_ROWS_PER_PARTITION))
        for column in VECTOR_COLUMNS.values():
            self.table.create_index(
                metric="dot", vector_column_name=column, index_type=ANN_INDEX_TYPE, num_partitions=partitions
            )
        self._has_ann_index = True

    def candidates(
        self, queries: GaussianEmbeddings, count: int, direction: str, nprobes: int | None = None
    ) -> torch.Tensor:
        """``(Q, count)`` ids of the rows with the largest ⟨−query map, stored map⟩ (−1 where fewer came back):
        a flat scan, or the IVF index's ``nprobes`` nearest partitions when ``nprobes`` is given."""
        query_vectors = (-kl_feature_map(queries.mu.cpu(), queries.logvar.cpu(), QUERY_SIDES[direction])).float()
        ids = torch.full((len(query_vectors), count), -1, dtype=torch.long)
        for start in range(0, len(query_vectors), QUERIES_PER_REQUEST):
            chunk = query_vectors[start : start + QUERIES_PER_REQUEST].numpy()
            search = (
                self.table.search(list(chunk), vector_column_name=VECTOR_COLUMNS[direction])
                .distance_type("dot")
                .select(["id", "_distance"])
                .limit(count)
            )
            search = search.bypass_vector_index() if nprobes is None else search.nprobes(nprobes)
            found = search.to_arrow()
            query_index = (
                found["query_index"].to_numpy() if "query_index" in found.schema.names else np.zeros(found.num_rows)
            )
            distances = found["_distance"].to_numpy()
            row_ids = found["id"].to_numpy()
            for offset in range(len(chunk)):
                mine = np.flatnonzero(query_index == offset)
                mine = mine[np.argsort(distances[mine], kind="stable")][:count]
                ids[start + offset, : len(mine)] = torch.from_numpy(row_ids[mine])
        return ids


__all__ = ["LANCEDB", "LANCEDB_ANN", "LanceTable", "is_database"]
