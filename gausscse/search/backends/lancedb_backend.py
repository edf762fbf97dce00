"""The LanceDB backends of ``GaussianIndex``: the Gaussians, the sentences and their inner-product vectors in an
embedded vector database (LanceDB: a folder of Lance files, no server), searched with its ``dot`` metric.

One table, ``gaussians``, one row per stored item: ``id`` (its position), ``mu`` and ``logvar`` (float32, d each),
``sentence`` (or null), and the two ``stored_map`` vectors (computed in float64, stored float32):
``entailing_vector`` = B(x) and ``entailed_by_vector`` = A(x) (the ``kl_feature_map`` maps, 2d + 2 values). A query q
is sent as −A(q) against ``entailing_vector`` (⟨−A(q), B(x)⟩ = −KL(q‖x)) or as −B(q) against ``entailed_by_vector``
(−KL(x‖q)), so LanceDB's ``dot`` ranking (its distance is 1 − ⟨query, row⟩, smallest first) puts first the items of
smallest KL: the highest ``sum`` and ``mean_kl`` similarities. An index of the search score (``kl_weight``) stores
[μ/‖μ‖, B(x)] (3d + 2 values) and sends [μ_q/‖μ_q‖, −(λ/d)A(q)]: the dot product is cos − λ·KL/d.
The vectors are never normalised: cosine or L2 on them would rank by something else. The table's schema metadata holds
the index settings, so ``GaussianIndex.load(uri)`` reopens it.
Exact (``"lancedb"``): every query bypasses any vector index (a flat ``dot`` scan of the table). Approximate
(``"lancedb-ann"``): LanceDB's own IVF index (``IVF_FLAT``, k-means partitions, ``nprobes`` of them scanned per
query). IVF on the raw vectors under ``dot`` finds few of the true neighbours (their norms differ from row to row by
design: measured in ``bench/bench_search.py``), so the ANN search runs, as ``"faiss-hnsw"`` does, on the vectors
turned into a nearest-neighbour problem (``gausscse.search.lift``): one more table per direction, ``ann_entailing`` /
``ann_entailed_by`` (``id``, ``vector``: the lifted map), with an ``l2`` IVF index and the fitted transform in its
schema metadata; the few items kept out of it are on every shortlist. Built at the first ANN search from all rows;
rows added later are found by a flat ``dot`` scan of just those rows until they outnumber the indexed ones, when the
next search rebuilds it. Either way ``GaussianIndex`` re-scores the shortlist exactly, as for FAISS. The backend, the
write lock, the table id and the ANN bookkeeping are shared with the Qdrant and Milvus backends
(``gausscse.search.backends.database``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock

from gausscse.io import first_line
from gausscse.model.gaussian import GaussianEmbeddings, search_map_width, stored_map
from gausscse.search.backends.database import (
    AnnTable,
    ApproximateSearch,
    DatabaseBackend,
    DatabaseStore,
    check_sentences,
    flat_query_vectors,
    in_id_order,
    transform_from_metadata,
    transform_metadata,
    write_lock,
)
from gausscse.search.lift import fit_lift

LANCEDB, LANCEDB_ANN = "lancedb", "lancedb-ann"
TABLE_NAME = "gaussians"
SETTINGS_KEY = b"gausscse"
ANN_TABLES = {"entailing": "ann_entailing", "entailed_by": "ann_entailed_by"}
ANN_KEY = b"gausscse_ann"  # the lift transform of an ANN table, and how many rows it was built from
VECTOR_COLUMNS = {"entailing": "entailing_vector", "entailed_by": "entailed_by_vector"}
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

    vector = pa.list_(pa.float32(), search_map_width(dim, settings.get("kl_weight")))
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


def check_new_database(uri: str | Path) -> None:
    """``FileExistsError`` unless ``uri`` can become a new database: a folder that does not exist or is empty (a
    database already there is reopened with ``GaussianIndex.load(uri)``; any other content is someone's data)."""
    folder = Path(uri)
    if is_database(folder):
        raise FileExistsError(
            f"{uri} already holds a GaussianIndex database: reopen it with GaussianIndex.load({str(uri)!r}), remove "
            "it or pass another uri"
        )
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        held = (
            "is a file" if not folder.is_dir() else f"holds {', '.join(sorted(p.name for p in folder.iterdir())[:4])}"
        )
        raise FileExistsError(f"{uri} {held}: a LanceDB database needs a new or empty folder of its own")


def is_database(uri: str | Path) -> bool:
    """Whether the folder ``uri`` holds a GaussianIndex table (checked without opening it)."""
    return (Path(uri) / f"{TABLE_NAME}.lance").is_dir()


class LanceTable(DatabaseStore):
    """The ``gaussians`` table of a LanceDB database at ``uri`` (a folder): rows in, shortlists out. Another handle's
    write shows as a new version of the table."""

    kind = "LanceDB table"
    default_suffix = ".lancedb"
    place = "the LanceDB database folder"

    def __init__(self, table, uri: str, settings: dict[str, Any]):
        super().__init__(uri, settings)
        self.table = table
        self.version = table.version  # the version of the table this handle has read

    @classmethod
    def create(cls, uri: str, settings: dict[str, Any]) -> LanceTable:
        check_new_database(uri)
        database = lancedb_module().connect(uri)
        return cls(database.create_table(TABLE_NAME, schema=table_schema(settings["dim"], settings)), uri, settings)

    @classmethod
    def open(cls, uri: str | Path) -> tuple[LanceTable, dict[str, Any]]:
        if not Path(uri).is_dir():  # connecting would create the folder
            raise FileNotFoundError(f"{uri} does not exist: no GaussianIndex database there")
        database = lancedb_module().connect(str(uri))
        if TABLE_NAME not in database.table_names():
            raise FileNotFoundError(f"{uri} holds no GaussianIndex table ({TABLE_NAME!r})")
        table = database.open_table(TABLE_NAME)
        metadata = table.schema.metadata or {}
        if SETTINGS_KEY not in metadata:
            raise ValueError(f"{uri}: table {TABLE_NAME!r} has no GaussianIndex settings in its schema metadata")
        settings = json.loads(metadata[SETTINGS_KEY])
        return cls(table, str(uri), settings), settings

    @classmethod
    def holds(cls, uri: str | Path) -> bool:
        return is_database(uri)

    @classmethod
    def check_new(cls, uri: str | Path) -> None:
        check_new_database(uri)

    def writing(self) -> FileLock:
        return write_lock(self.uri, Path(self.uri))

    def stored_settings(self) -> dict[str, Any]:
        try:
            self.table.checkout_latest()
        except Exception as error:  # LanceDB's own errors (a deleted or damaged database)
            raise ValueError(f"{self.uri}: the database cannot be read any more ({first_line(error)})") from None
        return json.loads((self.table.schema.metadata or {}).get(SETTINGS_KEY, b"{}"))

    def changed(self, known_rows: int) -> bool:
        if self.table.version == self.version:
            return False
        self.version = self.table.version
        return True

    def __len__(self) -> int:
        return self.table.count_rows()

    def append(self, embeddings: GaussianEmbeddings, first_id: int, sentences: Sequence[str] | None) -> None:
        """One write (one new version of the table)."""
        sentences = check_sentences(sentences, len(embeddings.mu))
        import pyarrow as pa

        mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
        columns = {
            "id": pa.array(np.arange(first_id, first_id + len(mu)), pa.int64()),
            "mu": fixed_size_rows(mu.numpy()),
            "logvar": fixed_size_rows(logvar.numpy()),
            "sentence": pa.array(sentences, pa.string()),
        }
        for direction, column in VECTOR_COLUMNS.items():
            columns[column] = fixed_size_rows(stored_map(mu, logvar, direction, self.kl_weight).numpy())
        self.table.add(pa.table(columns, schema=self.table.schema))
        self.version = self.table.version  # this handle's own write: nothing new to read

    def read(self, first_id: int = 0) -> tuple[GaussianEmbeddings, list[str | None]]:
        columns = ["id", "mu", "logvar", "sentence"]  # read without the two vector columns (2d + 2 values each)
        query = self.table.search().select(columns).limit(None)
        if first_id:
            query = query.where(f"id >= {int(first_id)}")
        rows = query.to_arrow().sort_by("id")
        in_id_order(rows["id"].to_numpy(), first_id, f"{self.uri} table {TABLE_NAME!r}")

        def matrix(name: str) -> torch.Tensor:
            column = rows[name].combine_chunks()
            width = column.type.list_size
            return torch.from_numpy(column.values.to_numpy(zero_copy_only=False).reshape(-1, width).copy())

        return GaussianEmbeddings(matrix("mu"), matrix("logvar")), rows["sentence"].to_pylist()

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str, first_id: int = 0) -> torch.Tensor:
        """A flat ``dot`` scan."""
        query_vectors = flat_query_vectors(queries, direction, self.kl_weight)
        return nearest_ids(self.table, VECTOR_COLUMNS[direction], query_vectors, count, "dot", first_id=first_id)

    def read_ann(self) -> dict[str, AnnTable]:
        database = lancedb_module().connect(self.uri)
        if not set(ANN_TABLES.values()) <= set(database.table_names()):
            return {}
        tables = {}
        for direction, name in ANN_TABLES.items():
            table = database.open_table(name)
            metadata = json.loads((table.schema.metadata or {})[ANN_KEY])
            tables[direction] = AnnTable(table, *transform_from_metadata(metadata, direction, self.dim, self.kl_weight))
        return tables

    def write_ann(self, embeddings: GaussianEmbeddings, direction: str) -> AnnTable:
        """The table ``ann_<direction>`` (replacing an older one) under an ``l2`` IVF index."""
        import pyarrow as pa

        transform, inliers, vectors = fit_lift(embeddings, direction, self.kl_weight)
        rows = len(embeddings.mu)
        metadata = {ANN_KEY: json.dumps(transform_metadata(transform, rows)).encode()}
        schema = pa.schema(
            [pa.field("id", pa.int64(), nullable=False), pa.field("vector", pa.list_(pa.float32(), vectors.shape[1]))],
            metadata=metadata,
        )
        data = pa.table({"id": pa.array(inliers, pa.int64()), "vector": fixed_size_rows(vectors)}, schema=schema)
        database = lancedb_module().connect(self.uri)
        table = database.create_table(ANN_TABLES[direction], data=data, schema=schema, mode="overwrite")
        partitions = max(1, min(int(math.sqrt(len(inliers))), len(inliers) // MIN_ROWS_PER_PARTITION))
        if len(inliers):
            table.create_index(
                metric="l2", vector_column_name="vector", index_type=ANN_INDEX_TYPE, num_partitions=partitions
            )
        return AnnTable(table, transform, rows)

    def ann_search(self, ann: AnnTable, vectors: np.ndarray, count: int, options: dict[str, int]) -> torch.Tensor:
        """``nprobes`` IVF partitions scanned per query."""
        # queries on the stored vectors' sphere (norm R): IVF picks partitions by L2 to centroids of unequal norms,
        # and a unit-length query would pick the centroids of smallest norm instead of largest inner product
        vectors = vectors * math.sqrt(ann.transform["radius2"][0])
        return nearest_ids(ann.table, "vector", vectors, count, "l2", options["nprobes"])


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


class LanceFlat(DatabaseBackend):
    """``backend="lancedb"``: the Gaussians, sentences and both maps in a LanceDB database at the ``uri`` option
    (``gausscse.search.backends.database.DatabaseBackend``), the shortlist from a flat ``dot`` scan."""

    name = LANCEDB
    store_class = LanceTable


class LanceAnn(ApproximateSearch, LanceFlat):
    """``backend="lancedb-ann"``: the same database searched through LanceDB's IVF index (``nprobes`` partitions per
    query) on the lifted maps, in one more table per direction (module docstring)."""

    name = LANCEDB_ANN


__all__ = ["LANCEDB", "LANCEDB_ANN", "AnnTable", "LanceAnn", "LanceFlat", "LanceTable", "is_database"]
