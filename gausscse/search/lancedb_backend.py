"""The LanceDB side of ``GaussianIndex``: the Gaussians, the sentences and their inner-product vectors in an embedded
vector database (LanceDB: a folder of Lance files, no server), searched with its ``dot`` metric.

One table, ``gaussians``, one row per stored item: ``id`` (its position), ``mu`` and ``logvar`` (float32, d each),
``sentence`` (or null), and the two ``kl_feature_map`` vectors (2d + 2 values, computed in float64, stored float32):
``entailing_vector`` = B(x) and ``entailed_by_vector`` = A(x). A query q is sent as −A(q) against
``entailing_vector`` (⟨−A(q), B(x)⟩ = −KL(q‖x)) or as −B(q) against ``entailed_by_vector`` (−KL(x‖q)), so LanceDB's
``dot`` ranking (its distance is 1 − ⟨query, row⟩, smallest first) puts first the items of smallest KL: the highest
``sum`` and ``mean_kl`` similarities. The vectors are never normalised: cosine or L2 on them would rank by something
else. The table's schema metadata holds the index settings, so ``GaussianIndex.load(uri)`` reopens it.

Exact (``"lancedb"``): every query bypasses any vector index (a flat ``dot`` scan of the table). Approximate
(``"lancedb-ann"``): LanceDB's own IVF index (``IVF_FLAT``, k-means partitions, ``nprobes`` of them scanned per
query). IVF on the raw vectors under ``dot`` finds few of the true neighbours (their norms differ from row to row by
design: measured in ``bench/bench_search.py``), so the ANN search runs, as ``"faiss-hnsw"`` does, on the vectors
turned into a nearest-neighbour problem (``gausscse.search.lift``): one more table per direction, ``ann_entailing`` /
``ann_entailed_by`` (``id``, ``vector``: the lifted map), with an ``l2`` IVF index and the fitted transform in its
schema metadata; the few items kept out of it are on every shortlist. Built at the first ANN search from all rows;
rows added later are found by a flat ``dot`` scan of just those rows until they outnumber the indexed ones, when the
next search rebuilds it. Either way ``GaussianIndex`` re-scores the shortlist exactly, as for FAISS.

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
from gausscse.search.lift import constant_column, fit_lift, lifted_queries

LANCEDB, LANCEDB_ANN = "lancedb", "lancedb-ann"
TABLE_NAME = "gaussians"
SETTINGS_KEY = b"gausscse"
ANN_TABLES = {"entailing": "ann_entailing", "entailed_by": "ann_entailed_by"}
ANN_KEY = b"gausscse_ann"  # the lift transform of an ANN table, and how many rows it was built from
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
        self._ann: dict[str, AnnTable] | None = None  # read from the database at the first ANN search, then kept

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
        columns = ["id", "mu", "logvar", "sentence"]  # read without the two vector columns (2d + 2 values each)
        rows = self.table.search().select(columns).limit(None).to_arrow().sort_by("id")
        ids = rows["id"].to_numpy()
        if not np.array_equal(ids, np.arange(len(ids))):
            raise ValueError(f"{self.uri}: the ids of table {TABLE_NAME!r} are not 0..{len(ids) - 1}")

        def matrix(name: str) -> torch.Tensor:
            column = rows[name].combine_chunks()
            width = column.type.list_size
            return torch.from_numpy(column.values.to_numpy(zero_copy_only=False).reshape(-1, width).copy())

        return GaussianEmbeddings(matrix("mu"), matrix("logvar")), rows["sentence"].to_pylist()

    def ann_tables(self) -> dict[str, AnnTable]:
        """The ANN tables of both directions ({} if they were never built), read once."""
        if self._ann is None:
            database = lancedb_module().connect(self.uri)
            names = set(database.table_names())
            self._ann = {}
            if set(ANN_TABLES.values()) <= names:
                self._ann = {
                    direction: AnnTable.open(database, name, direction) for direction, name in ANN_TABLES.items()
                }
        return self._ann

    def ann_covers(self, size: int) -> bool:
        """Whether ANN tables exist for an index of ``size`` rows: built, and the rows added since (scanned flat)
        no more than the rows they were built from."""
        tables = self.ann_tables()
        return bool(tables) and all(size - table.rows <= table.rows for table in tables.values())

    def build_ann_index(self, embeddings: GaussianEmbeddings) -> None:
        """(Re)build the ANN table of each direction from the stored Gaussians ``embeddings`` (all rows, id order)."""
        database = lancedb_module().connect(self.uri)
        self._ann = {
            direction: AnnTable.build(database, name, embeddings, direction) for direction, name in ANN_TABLES.items()
        }

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str, first_id: int = 0) -> torch.Tensor:
        """``(Q, count)`` ids of the rows (from ``first_id`` on) with the largest ⟨−query map, stored map⟩ (−1 where
        fewer came back): a flat ``dot`` scan."""
        query_vectors = -kl_feature_map(queries.mu.cpu(), queries.logvar.cpu(), QUERY_SIDES[direction])
        return nearest_ids(
            self.table, VECTOR_COLUMNS[direction], query_vectors.float().numpy(), count, "dot", first_id=first_id
        )

    def ann_candidates(
        self, queries: GaussianEmbeddings, count: int, direction: str, nprobes: int, size: int
    ) -> torch.Tensor:
        """``(Q, C)`` ids: the ANN table's ``count`` nearest lifted vectors (``nprobes`` IVF partitions), then the
        rows added since it was built (flat scan) and the items kept out of it (scored exactly by the caller)."""
        ann = self.ann_tables()[direction]
        # queries on the stored vectors' sphere (norm R): IVF picks partitions by L2 to centroids of unequal norms,
        # and a unit-length query would pick the centroids of smallest norm instead of largest inner product
        query_vectors = lifted_queries(queries, direction, ann.transform) * math.sqrt(ann.transform["radius2"][0])
        parts = [nearest_ids(ann.table, "vector", query_vectors, count, "l2", nprobes)]
        if size > ann.rows:
            parts.append(self.candidates(queries, min(count, size - ann.rows), direction, first_id=ann.rows))
        if len(ann.transform["outliers"]):
            outliers = torch.from_numpy(ann.transform["outliers"])
            parts.append(outliers.expand(len(queries), len(outliers)))
        return torch.cat(parts, dim=1)


class AnnTable:
    """One direction's ANN table: lifted vectors under an ``l2`` IVF index, the transform they were lifted with, and
    the number of stored rows it was built from (module docstring)."""

    def __init__(self, table, transform: dict[str, np.ndarray], rows: int):
        self.table, self.transform, self.rows = table, transform, rows

    @classmethod
    def build(cls, database, name: str, embeddings: GaussianEmbeddings, direction: str) -> AnnTable:
        """Fit the lift on ``embeddings``, write the table ``name`` (replacing an older one) and index it."""
        import pyarrow as pa

        transform, inliers, vectors = fit_lift(embeddings, direction)
        rows = len(embeddings.mu)
        metadata = {
            "mean": transform["mean"].tolist(),
            "scale": transform["scale"].tolist(),
            "radius2": float(transform["radius2"][0]),
            "outliers": transform["outliers"].tolist(),
            "rows": rows,
        }
        schema = pa.schema(
            [pa.field("id", pa.int64(), nullable=False), pa.field("vector", pa.list_(pa.float32(), vectors.shape[1]))],
            metadata={ANN_KEY: json.dumps(metadata).encode()},
        )
        data = pa.table({"id": pa.array(inliers, pa.int64()), "vector": fixed_size_rows(vectors)}, schema=schema)
        table = database.create_table(name, data=data, schema=schema, mode="overwrite")
        partitions = max(1, min(int(math.sqrt(len(inliers))), len(inliers) // MIN_ROWS_PER_PARTITION))
        if len(inliers):
            table.create_index(
                metric="l2", vector_column_name="vector", index_type=ANN_INDEX_TYPE, num_partitions=partitions
            )
        return cls(table, transform, rows)

    @classmethod
    def open(cls, database, name: str, direction: str) -> AnnTable:
        """The ANN table ``name`` of ``direction`` in ``database`` and the transform in its schema metadata."""
        table = database.open_table(name)
        metadata = json.loads((table.schema.metadata or {})[ANN_KEY])
        width = table.schema.field("vector").type.list_size
        dim = (width - 1) // 2
        transform = {
            "keep": np.array([column for column in range(2 * dim + 2) if column != constant_column(direction, dim)]),
            "mean": np.array(metadata["mean"], dtype=np.float64),
            "scale": np.array(metadata["scale"], dtype=np.float64),
            "radius2": np.array([metadata["radius2"]]),
            "outliers": np.array(metadata["outliers"], dtype=np.int64),
        }
        return cls(table, transform, int(metadata["rows"]))


def nearest_ids(
    table,
    column: str,
    query_vectors: np.ndarray,
    count: int,
    metric: str,
    nprobes: int | None = None,
    first_id: int = 0,
) -> torch.Tensor:
    """``(Q, count)`` ids of ``table``'s ``count`` rows nearest each query vector in ``column`` under LanceDB's
    ``metric`` (``dot``: largest inner product; ``l2``: smallest distance), in no particular order (the caller
    re-scores them), −1 where fewer came back: through the table's IVF index (``nprobes`` partitions) when
    ``nprobes`` is given, else a flat scan of the rows from ``first_id`` on. One request per ``QUERIES_PER_REQUEST``
    queries; its rows are put in place by their ``query_index``."""
    ids = torch.full((len(query_vectors), count), -1, dtype=torch.long)
    for start in range(0, len(query_vectors), QUERIES_PER_REQUEST):
        chunk = np.ascontiguousarray(query_vectors[start : start + QUERIES_PER_REQUEST], dtype=np.float32)
        search = (
            table.search(list(chunk), vector_column_name=column)
            .distance_type(metric)
            .select(["id", "_distance"])
            .limit(count)
        )
        if nprobes is not None:
            search = search.nprobes(nprobes)
        else:
            search = search.bypass_vector_index()
            if first_id:
                search = search.where(f"id >= {first_id}", prefilter=True)
        found = search.to_arrow()
        query_index = (
            found["query_index"].to_numpy().astype(np.int64)
            if "query_index" in found.schema.names
            else np.zeros(found.num_rows, dtype=np.int64)
        )
        order = np.argsort(query_index, kind="stable")  # each query's rows together (re-scored later: any order)
        query_index, row_ids = query_index[order], found["id"].to_numpy()[order]
        rank = np.arange(len(order)) - np.searchsorted(query_index, query_index)  # place within the query's rows
        kept = rank < count
        ids[start + query_index[kept], rank[kept]] = torch.from_numpy(row_ids[kept])
    return ids


__all__ = ["LANCEDB", "LANCEDB_ANN", "AnnTable", "LanceTable", "is_database"]
