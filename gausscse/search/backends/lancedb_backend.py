"""The LanceDB backends: an embedded database (a folder of Lance files) whose table ``gaussians`` holds the rows of
``gausscse.search.backends.database``. ``"lancedb"`` scans them under ``dot``, ``"lancedb-ann"`` goes through an
``IVF_FLAT`` index (``nprobes`` partitions scanned per query) on the lifted maps, in the tables ``ann_<direction>``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from filelock import FileLock

from gausscse.io import first_line, json_value
from gausscse.model.gaussian import GaussianEmbeddings, search_map_width
from gausscse.search.backends.base import engine_module
from gausscse.search.backends.database import (
    ANN_KEY,
    MAP_FIELDS,
    SETTINGS_KEY,
    DatabaseBackend,
    DatabaseStore,
    check_unused,
    id_range,
    in_id_order,
)

LANCEDB, LANCEDB_ANN = "lancedb", "lancedb-ann"
TABLE_NAME = "gaussians"
MIN_ROWS_PER_PARTITION = 256  # IVF partitions: √N, at least this many rows each (k-means needs data)
WRITE_LOCK = ".gausscse-write.lock"  # the file lock writers of a database take, in its folder


def connect(uri: str | Path):
    return engine_module("lancedb", "lancedb").connect(str(uri))


def arrow_rows(ids: np.ndarray, columns: dict[str, Any], schema):
    """Rows ``ids`` with their ``columns`` (``sentence``: strings; the others ``(N, width)`` arrays, stored as
    float32 fixed-size lists) as an Arrow table of ``schema``."""
    import pyarrow as pa

    data = {"id": pa.array(ids, pa.int64())}
    for name, values in columns.items():
        if name == "sentence":
            data[name] = pa.array(values, pa.string())
        else:
            values = np.ascontiguousarray(values, dtype=np.float32)
            data[name] = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1])
    return pa.table(data, schema=schema)


def metadata_value(table, key: str, where: str) -> Any:
    """The JSON object under ``key`` in ``table``'s schema metadata (``{}`` if none)."""
    return json_value((table.schema.metadata or {}).get(key.encode(), b"{}"), where)


class LanceTable(DatabaseStore):
    """The ``gaussians`` table of a LanceDB database folder; another handle's write shows as a new table version."""

    kind = "LanceDB table"

    default_suffix = ".lancedb"
    place = "the LanceDB database folder"

    def __init__(self, table, uri: str, settings: dict[str, Any]):
        super().__init__(uri, settings)
        self.table = table
        self.version = table.version  # the version of the table this handle has read

    @classmethod
    def create(cls, uri: str, settings: dict[str, Any]) -> LanceTable:
        import pyarrow as pa

        cls.check_new(uri)
        dim = settings["dim"]
        vector = pa.list_(pa.float32(), search_map_width(dim, settings.get("kl_weight")))
        fields = [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("mu", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("logvar", pa.list_(pa.float32(), dim), nullable=False),
            pa.field("sentence", pa.string()),
            *(pa.field(column, vector, nullable=False) for column in MAP_FIELDS.values()),
        ]
        schema = pa.schema(fields, metadata={SETTINGS_KEY: json.dumps(settings)})
        return cls(connect(uri).create_table(TABLE_NAME, schema=schema), uri, settings)

    @classmethod
    def open(cls, uri: str | Path) -> tuple[LanceTable, dict[str, Any]]:
        if not Path(uri).is_dir():  # connecting would create the folder
            raise FileNotFoundError(f"{uri} does not exist: no GaussianIndex database there")
        database = connect(uri)
        if TABLE_NAME not in database.table_names():
            raise FileNotFoundError(f"{uri} holds no GaussianIndex table ({TABLE_NAME!r})")
        table = database.open_table(TABLE_NAME)
        if SETTINGS_KEY.encode() not in (table.schema.metadata or {}):
            raise ValueError(f"{uri}: table {TABLE_NAME!r} has no GaussianIndex settings in its schema metadata")
        settings = metadata_value(table, SETTINGS_KEY, f"{uri} table {TABLE_NAME!r} settings")
        store = cls(table, str(uri), settings)
        for column in ("mu", "logvar"):  # the rows are read per search: their width is checked once, here
            width = getattr(table.schema.field(column).type, "list_size", None)
            if width != store.dim:
                raise ValueError(f"{uri} {cls.kind} have dimension {width}, the index {store.dim}")
        return store, settings

    @classmethod
    def holds(cls, uri: str | Path) -> bool:
        return (Path(uri) / f"{TABLE_NAME}.lance").is_dir()  # seen without opening it

    @classmethod
    def check_new(cls, uri: str | Path) -> None:
        if cls.holds(uri):
            reopen = f"reopen it with GaussianIndex.load({str(uri)!r}), remove it or pass another uri"
            raise FileExistsError(f"{uri} already holds a GaussianIndex database: {reopen}")
        check_unused(Path(uri), "a LanceDB database needs a new or empty folder of its own")

    def writing(self) -> FileLock:
        Path(self.uri).mkdir(parents=True, exist_ok=True)
        return FileLock(str(Path(self.uri) / WRITE_LOCK))

    def stored_settings(self) -> dict[str, Any]:
        try:
            self.table.checkout_latest()
        except Exception as error:  # LanceDB's own errors (a deleted or damaged database)
            raise ValueError(f"{self.uri}: the database cannot be read any more ({first_line(error)})") from None
        return metadata_value(self.table, SETTINGS_KEY, f"{self.uri} table {TABLE_NAME!r} settings")

    def changed(self, known_rows: int, stored: dict[str, Any]) -> bool:
        if self.table.version == self.version:
            return False
        self.version = self.table.version
        return True

    def insert(self, ids: np.ndarray, columns: dict[str, Any], table: Any = None) -> None:
        """One write (one new version of the table)."""
        self.table.add(arrow_rows(ids, columns, self.table.schema))
        self.version = self.table.version  # this handle's own write: nothing new to read

    def read(self, first_id: int = 0) -> tuple[GaussianEmbeddings, list[str | None]]:
        query = self.table.search().select(["id", "mu", "logvar", "sentence"]).limit(None)  # not the vectors
        if first_id:
            query = query.where(f"id >= {int(first_id)}")
        rows = query.to_arrow().sort_by("id")
        in_id_order(rows["id"].to_numpy(), first_id, f"{self.uri} table {TABLE_NAME!r}")

        def matrix(name: str) -> torch.Tensor:
            column = rows[name].combine_chunks()  # its own width: index.checked names one that is not the settings' d
            return torch.from_numpy(column.flatten().to_numpy().reshape(-1, column.type.list_size).copy())

        return GaussianEmbeddings(matrix("mu"), matrix("logvar")), rows["sentence"].to_pylist()

    def row_total(self) -> int:
        return self.table.count_rows()  # an add is one write: its rows are all there or none

    def read_ids(self, ids: np.ndarray) -> list[dict[str, Any]]:
        """The rows ``ids``, one filtered read."""
        wanted = ", ".join(str(int(row)) for row in ids)
        query = self.table.search().where(f"id IN ({wanted})").select(["id", "mu", "logvar", "sentence"])
        return query.limit(None).to_arrow().to_pylist()

    def find_ann(self, direction: str) -> tuple[Any, dict[str, Any]] | None:
        database, name = connect(self.uri), f"ann_{direction}"
        if name not in database.table_names():
            return None
        table = database.open_table(name)
        return table, metadata_value(table, ANN_KEY, f"{self.uri} table {name!r}")

    def new_ann_table(self, direction: str, ids: np.ndarray, vectors: np.ndarray, metadata: dict[str, Any]) -> Any:
        """The table ``ann_<direction>`` with an ``l2`` IVF index (``√N`` partitions)."""
        import pyarrow as pa

        schema = pa.schema(
            [pa.field("id", pa.int64(), nullable=False), pa.field("vector", pa.list_(pa.float32(), vectors.shape[1]))],
            metadata={ANN_KEY: json.dumps(metadata)},
        )
        data = arrow_rows(ids, {"vector": vectors}, schema)
        table = connect(self.uri).create_table(f"ann_{direction}", data=data, schema=schema, mode="overwrite")
        if len(ids):
            partitions = max(1, min(int(math.sqrt(len(ids))), len(ids) // MIN_ROWS_PER_PARTITION))
            table.create_index(
                metric="l2", vector_column_name="vector", index_type="IVF_FLAT", num_partitions=partitions
            )
        return table

    def search(
        self, vectors: np.ndarray, count: int, direction: str, first_id=0, ann=None, options=None, end_id=None
    ) -> list:
        """The rows nearest each of ``vectors`` under ``dot`` (a flat scan), or under ``l2`` through the IVF index of
        ``ann`` (``nprobes`` partitions); each query's ids in no particular order."""
        if ann is None:
            query = self.table.search(list(vectors), vector_column_name=MAP_FIELDS[direction]).distance_type("dot")
            query = query.bypass_vector_index()
            if first_id or end_id is not None:
                query = query.where(id_range(first_id, end_id), prefilter=True)
        else:  # on the stored vectors' sphere (norm R): IVF picks partitions by L2 to centroids of unequal norms, and
            # a unit-length query would pick those of smallest norm instead of largest inner product
            vectors = (vectors * math.sqrt(ann.transform["radius2"][0])).astype(np.float32)
            query = ann.table.search(list(vectors), vector_column_name="vector").distance_type("l2")
            query = query.nprobes(options["nprobes"])
        found = query.select(["id", "_distance"]).limit(count).to_arrow()
        has_owner = "query_index" in found.schema.names
        owner = found["query_index"].to_numpy() if has_owner else np.zeros(found.num_rows, np.int64)
        order = np.argsort(owner, kind="stable")  # each query's rows together
        return np.split(found["id"].to_numpy()[order], np.searchsorted(owner[order], np.arange(1, len(vectors))))


class LanceFlat(DatabaseBackend):
    """``backend="lancedb"``: the LanceDB table at the ``uri`` option, searched by a flat raw inner-product scan."""

    name = LANCEDB
    store_class = LanceTable


class LanceAnn(LanceFlat):
    """``backend="lancedb-ann"``: the LanceDB table at the ``uri`` option, searched by its ANN index (IVF) on the lifted
    maps."""

    name = LANCEDB_ANN
    approximate = True
