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
next search rebuilds it. Either way ``GaussianIndex`` re-scores the shortlist exactly, as for FAISS.

The same vectors and metric serve a server engine when one machine is outgrown (README: pgvector, Qdrant, Milvus).
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock

from gausscse.io import first_line
from gausscse.model.gaussian import GaussianEmbeddings, query_map, search_map_width, stored_map
from gausscse.search.backends.base import SearchBackend
from gausscse.search.lift import fit_lift, kept_columns, lifted_queries

LANCEDB, LANCEDB_ANN = "lancedb", "lancedb-ann"
TABLE_NAME = "gaussians"
SETTINGS_KEY = b"gausscse"
ANN_TABLES = {"entailing": "ann_entailing", "entailed_by": "ann_entailed_by"}
WRITE_LOCK = ".gausscse-write.lock"  # the file lock writers of one database take (in its folder)
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


class LanceTable:
    """The ``gaussians`` table of a LanceDB database at ``uri``: rows in, shortlists out.

    Several handles (threads, processes) may share one database: writers take ``WRITE_LOCK`` (a file lock in the
    database folder) and number their rows after the table's current last row, and every handle sees what the others
    wrote through [`refresh`]. ``table_id``: a random id drawn when the table was created, which a saved index records,
    so a database deleted and built again for another corpus is told apart from the one it was built on."""

    def __init__(self, table, uri: str, settings: dict[str, Any]):
        self.table = table
        self.uri = uri
        try:  # the stored maps' dimension and search score, and the table's identity
            self.dim, self.kl_weight, self.table_id = (
                int(settings["dim"]),
                settings.get("kl_weight"),
                settings.get("table_id"),
            )
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{uri}: the GaussianIndex settings of table {TABLE_NAME!r} have no valid 'dim'") from None
        self.version = table.version  # the version of the table this handle has read
        self._ann: dict[str, AnnTable] | None = None  # read from the database at the first ANN search, then kept

    def writing(self):
        """The database's write lock (a context manager), held while rows are numbered and written."""
        Path(self.uri).mkdir(parents=True, exist_ok=True)
        return FileLock(str(Path(self.uri) / WRITE_LOCK))

    def refresh(self) -> bool:
        """Move to the table's latest version; ``True`` when another handle wrote since this one last read (the ANN
        tables are then read again at the next ANN search). ``ValueError`` if the table is no longer the one this
        handle opened (the database was deleted and built again)."""
        try:
            self.table.checkout_latest()
        except Exception as error:  # LanceDB's own errors (a deleted or damaged database)
            raise ValueError(f"{self.uri}: the database cannot be read any more ({first_line(error)})") from None
        stored = json.loads((self.table.schema.metadata or {}).get(SETTINGS_KEY, b"{}"))
        if stored.get("table_id") != self.table_id:
            raise ValueError(
                f"{self.uri} now holds another GaussianIndex table (id {stored.get('table_id')}, this index's is "
                f"{self.table_id}): the database was replaced; load the index again"
            )
        if self.table.version == self.version:
            return False
        self.version, self._ann = self.table.version, None
        return True

    @classmethod
    def create(cls, uri: str | Path, dim: int, settings: dict[str, Any]) -> LanceTable:
        """A new, empty table ([`check_new_database`] first: nothing stored is overwritten)."""
        check_new_database(uri)
        database = lancedb_module().connect(str(uri))
        settings = {**settings, "dim": dim, "table_id": uuid.uuid4().hex}
        return cls(database.create_table(TABLE_NAME, schema=table_schema(dim, settings)), str(uri), settings)

    @classmethod
    def open(cls, uri: str | Path) -> tuple[LanceTable, dict[str, Any]]:
        """The table at ``uri`` and the settings stored with it; ``FileNotFoundError`` if there is none."""
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

    def __len__(self) -> int:
        return self.table.count_rows()

    def append(self, embeddings: GaussianEmbeddings, first_id: int, sentences: Sequence[str] | None) -> None:
        """Rows ``first_id, first_id + 1, ...`` for ``embeddings`` (float32, checked by the index) and their
        sentences; one write (one new version of the table). The caller holds [`writing`] and has read every row
        before ``first_id``."""
        if sentences is not None:
            if isinstance(sentences, str) or len(sentences) != len(embeddings.mu):
                raise ValueError(f"sentences must be a list of {len(embeddings.mu)} strings, one per Gaussian")
            kinds = {type(sentence).__name__ for sentence in sentences if not isinstance(sentence, str)}
            if kinds:
                raise ValueError(f"sentences must be strings, one per Gaussian; got {', '.join(sorted(kinds))}")
        import pyarrow as pa

        mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
        columns = {
            "id": pa.array(np.arange(first_id, first_id + len(mu)), pa.int64()),
            "mu": fixed_size_rows(mu.numpy()),
            "logvar": fixed_size_rows(logvar.numpy()),
            "sentence": pa.array(list(sentences) if sentences is not None else [None] * len(mu), pa.string()),
        }
        for direction, column in VECTOR_COLUMNS.items():
            columns[column] = fixed_size_rows(stored_map(mu, logvar, direction, self.kl_weight).numpy())
        self.table.add(pa.table(columns, schema=self.table.schema))
        self.version = self.table.version  # this handle's own write: nothing new to read

    def read(self, first_id: int = 0) -> tuple[GaussianEmbeddings, list[str | None]]:
        """The stored Gaussians and sentences from id ``first_id`` on, in id order."""
        columns = ["id", "mu", "logvar", "sentence"]  # read without the two vector columns (2d + 2 values each)
        query = self.table.search().select(columns).limit(None)
        if first_id:
            query = query.where(f"id >= {int(first_id)}")
        rows = query.to_arrow().sort_by("id")
        ids = rows["id"].to_numpy()
        if not np.array_equal(ids, np.arange(first_id, first_id + len(ids))):
            raise ValueError(
                f"{self.uri}: the ids of table {TABLE_NAME!r} are not {first_id}..{first_id + len(ids) - 1}"
            )

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
                    direction: AnnTable.open(database, name, direction, self.dim, self.kl_weight)
                    for direction, name in ANN_TABLES.items()
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
            direction: AnnTable.build(database, name, embeddings, direction, self.kl_weight)
            for direction, name in ANN_TABLES.items()
        }

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str, first_id: int = 0) -> torch.Tensor:
        """``(Q, count)`` ids of the rows (from ``first_id`` on) with the largest ⟨query map, stored map⟩ (−1 where
        fewer came back): a flat ``dot`` scan."""
        query_vectors = query_map(queries.mu.cpu(), queries.logvar.cpu(), direction, self.kl_weight)
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
        query_vectors = lifted_queries(queries, direction, ann.transform, self.kl_weight)
        query_vectors *= math.sqrt(ann.transform["radius2"][0])
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
    def build(
        cls, database, name: str, embeddings: GaussianEmbeddings, direction: str, kl_weight: float | None
    ) -> AnnTable:
        """Fit the lift on ``embeddings``, write the table ``name`` (replacing an older one) and index it."""
        import pyarrow as pa

        transform, inliers, vectors = fit_lift(embeddings, direction, kl_weight)
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
    def open(cls, database, name: str, direction: str, dim: int, kl_weight: float | None) -> AnnTable:
        """The ANN table ``name`` of ``direction`` in ``database`` (for Gaussians of dimension ``dim``) and the
        transform in its schema metadata."""
        table = database.open_table(name)
        metadata = json.loads((table.schema.metadata or {})[ANN_KEY])
        transform = {
            "keep": kept_columns(direction, dim, kl_weight),
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


class LanceFlat(SearchBackend):
    """``backend="lancedb"``: the Gaussians, sentences and both maps in a LanceDB database at the ``uri`` option
    (created; one that already holds an index is refused), the shortlist from a flat ``dot`` scan. The database is the
    index's store: every ``add`` is written to it at once under its write lock, and rows other handles wrote are read
    before each search (``sync``)."""

    name = LANCEDB
    database = True

    def __init__(self, index, options: dict[str, Any]) -> None:
        super().__init__(index, options)
        self.uri = str(Path(options["uri"]).resolve())
        self.nprobes = options["nprobes"]
        stored = {**index.base_settings(), "nprobes": self.nprobes}  # the size and place are the database's own
        table = options.get("table")
        self.table: LanceTable = table if table is not None else LanceTable.create(self.uri, index.dim, stored)

    def settings(self) -> dict[str, Any]:
        return {"uri": self.uri, "nprobes": self.nprobes, "table_id": self.table.table_id}

    def add(self, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None) -> None:
        with self.table.writing():  # ids after the table's last row, whoever wrote it
            self.sync()
            self.table.append(embeddings, len(self.index), sentences)
            self.index.store(embeddings)

    def sync(self) -> None:
        if self.table.refresh():
            stored, _ = self.table.read(first_id=len(self.index))
            if len(stored):
                self.index.store(self.index.checked(stored, f"{self.uri} table {TABLE_NAME!r}"))

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor:
        return self.table.candidates(queries, count, direction)

    def check_saved(self, settings: dict[str, Any], settings_file: Path) -> None:
        """``ValueError`` unless the saved index ``settings`` name this database's table (its ``table_id``)."""
        if settings.get("table_id") != self.table.table_id:
            raise ValueError(
                f"{settings_file} was built on the LanceDB table {settings.get('table_id')} at {self.uri}, which now "
                f"holds another one ({self.table.table_id}): the database was replaced; build this index again"
            )

    @classmethod
    def holds_index(cls, uri: str | Path) -> bool:
        return is_database(uri)

    @classmethod
    def check_new_place(cls, uri: str | Path) -> None:
        check_new_database(uri)

    @classmethod
    def open(cls, uri: str | Path):
        """The index stored in the database at ``uri`` (settings from its table's metadata; the Gaussians read back
        for the exact re-score); its ``add`` goes on writing to that database."""
        from gausscse.search.index import GaussianIndex

        table, settings = LanceTable.open(uri)
        try:
            index = GaussianIndex(
                int(settings["dim"]),
                settings["reduction"],
                settings["backend"],
                candidates_per_result=int(settings["candidates_per_result"]),
                uri=uri,
                nprobes=int(settings["nprobes"]),
                kl_weight=settings.get("kl_weight"),
                _table=table,
            )
        except KeyError as error:
            raise ValueError(f"{uri}: the stored GaussianIndex settings have no {error.args[0]!r}") from None
        stored, _ = table.read()
        index.store(index.checked(stored, f"{uri} table {TABLE_NAME!r}"))
        return index


class LanceAnn(LanceFlat):
    """``backend="lancedb-ann"``: the same database searched through LanceDB's IVF index (``nprobes`` partitions per
    query) on the lifted maps, in one more table per direction (module docstring), built at the first search and
    rebuilt when later rows outnumber the indexed ones."""

    name = LANCEDB_ANN

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor:
        size = len(self.index)
        if not self.table.ann_covers(size):
            with self.table.writing():
                self.table.build_ann_index(self.index.embeddings)
        return self.table.ann_candidates(queries, count, direction, self.nprobes, size)


__all__ = ["LANCEDB", "LANCEDB_ANN", "AnnTable", "LanceAnn", "LanceFlat", "LanceTable", "is_database"]
