"""The Milvus backends: ``"milvus"`` (a ``FLAT`` index under ``IP``) and ``"milvus-hnsw"`` (Milvus's HNSW index on
the lifted maps, ``ef`` = ``ef_search``). ``uri``: a Milvus Lite file ending in ``.db`` or a server URL, ``#name``
picking the collection. A search returns at most 16,384 hits per query: a longer shortlist is an exact scan."""

from __future__ import annotations

import contextlib
import functools
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gausscse.search.backends import database
from gausscse.search.backends.base import HNSW_EF_CONSTRUCTION, HNSW_NEIGHBOURS, engine_module
from gausscse.search.backends.database import CollectionStore, DatabaseBackend

MILVUS, MILVUS_HNSW = "milvus", "milvus-hnsw"
MAX_SENTENCE_BYTES = 65535  # Milvus's longest VARCHAR
MAX_HITS = 16384  # Milvus's most hits per query (topk), and most rows per query
ROWS_PER_REQUEST = 2048
LOCK_KEY = "gausscse_writer"  # the property of the writers' lock collection: its holder
READ_FIELDS = ["id", "mu", "logvar", "sentence"]  # what a read of rows returns
COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def milvus_module():
    return engine_module("pymilvus", "pymilvus milvus-lite")


class MilvusStore(CollectionStore):
    """One index's collection in a Milvus database (module docstring)."""

    kind = "Milvus collection"

    backend_name = "milvus"
    default_suffix = ".milvus.db"
    place = "a Milvus Lite file ending in .db or a server URL, with an optional #collection"
    max_shortlist = MAX_HITS
    max_sentence_bytes = MAX_SENTENCE_BYTES
    new_place = "a Milvus Lite database needs a new name ending in .db, or a Milvus Lite one"

    @staticmethod
    @functools.cache
    def connect(place: str):
        """The ``MilvusClient`` of ``place`` (a Milvus Lite file or a server URL)."""
        return milvus_module().MilvusClient(uri=place)

    @staticmethod
    def exists(client, name: str) -> bool:
        return client.has_collection(name)

    @staticmethod
    def metadata(client, name: str) -> dict[str, Any]:
        """The properties ``SETTINGS_KEY`` and ``ANN_KEY``, JSON decoded (left out where they are not JSON)."""
        properties = client.describe_collection(name).get("properties", {})
        decoded = {}
        for key in properties.keys() & {database.SETTINGS_KEY, database.ANN_KEY}:
            with contextlib.suppress(TypeError, ValueError):
                decoded[key] = json.loads(properties[key])
        return decoded

    @staticmethod
    def opened(client, name: str) -> None:
        """Load the collection for searches and queries (another process's client may have released it)."""
        client.load_collection(name)

    @classmethod
    def is_database(cls, path: Path) -> bool:
        """A Milvus Lite database: a folder ending in .db with its ``collections`` and ``databases`` folders."""
        return path.name.endswith(".db") and (path / "collections").is_dir() and (path / "databases").is_dir()

    @classmethod
    def check_uri(cls, place: str, name: str) -> None:
        if not database.is_server(place) and not place.endswith(".db"):
            raise ValueError(f"uri {place}: a Milvus database is a Milvus Lite file ending in .db or a server URL")
        if not COLLECTION_NAME.fullmatch(name):
            raise ValueError(f"uri {place}#{name}: a Milvus collection name is letters, digits and '_', got {name!r}")

    def make_collection(self, name: str, fields: dict[str, tuple], index: dict[str, dict], properties: dict) -> None:
        """The collection ``name``: an ``INT64`` key ``id``, ``fields`` ``{name: (DataType name, options)}``, ``index``
        ``{field: add_index options}`` and JSON ``properties``."""
        data_type = milvus_module().DataType
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", data_type.INT64, is_primary=True)
        for field, (kind, options) in fields.items():
            schema.add_field(field, getattr(data_type, kind), **options)
        index_params = self.client.prepare_index_params()
        for field, options in index.items():
            index_params.add_index(field_name=field, **options)
        properties = {key: json.dumps(value) for key, value in properties.items()}
        self.client.create_collection(
            name, schema=schema, index_params=index_params, consistency_level="Strong", properties=properties
        )

    def new_collection(self, settings: dict[str, Any]) -> None:
        floats = {"element_type": milvus_module().DataType.FLOAT, "max_capacity": self.dim}
        fields = {
            "mu": ("ARRAY", floats),
            "logvar": ("ARRAY", floats),
            "sentence": ("VARCHAR", {"max_length": MAX_SENTENCE_BYTES, "nullable": True}),
            **{field: ("FLOAT_VECTOR", {"dim": self.sizes()[field]}) for field in self.map_fields.values()},
        }
        flat = {field: {"index_type": "FLAT", "metric_type": "IP"} for field in self.map_fields.values()}
        self.make_collection(self.name, fields, flat, {database.SETTINGS_KEY: settings})

    def new_ann_collection(self, name: str, width: int, metadata: dict[str, Any]) -> None:
        graph = {"M": HNSW_NEIGHBOURS, "efConstruction": HNSW_EF_CONSTRUCTION}
        hnsw = {"vector": {"index_type": "HNSW", "metric_type": "IP", "params": graph}}
        self.make_collection(name, {"vector": ("FLOAT_VECTOR", {"dim": width})}, hnsw, metadata)

    def drop(self, name: str) -> None:
        self.client.drop_collection(name)

    def new_lock(self, name: str, holder: str) -> None:
        """A collection whose property ``LOCK_KEY`` is ``holder``: a server takes a second one of the same name as a
        retry of the first where every parameter is the same (one writer's own request), Milvus Lite refuses it."""
        data_type = milvus_module().DataType
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", data_type.INT64, is_primary=True)
        schema.add_field("vector", data_type.FLOAT_VECTOR, dim=2)
        self.client.create_collection(name, schema=schema, properties={LOCK_KEY: holder})

    def lock_holder(self, name: str) -> str | None:
        if not self.exists(self.client, name):
            return None
        return self.client.describe_collection(name).get("properties", {}).get(LOCK_KEY)

    def vector_sizes(self) -> dict[str, int]:
        """The ``dim`` of the vector fields and the ``max_capacity`` of the arrays."""
        described = self.client.describe_collection(self.name)["fields"]
        params = {field["name"]: field.get("params", {}) for field in described}
        return {
            name: params.get(name, {}).get("dim", params.get(name, {}).get("max_capacity")) for name in self.sizes()
        }

    def write_settings(self, settings: dict[str, Any]) -> None:
        self.client.alter_collection_properties(self.name, properties={database.SETTINGS_KEY: json.dumps(settings)})

    def delete_from(self, first_id: int) -> None:
        self.client.delete(self.name, filter=f"id >= {first_id}")

    def row_count(self, table: str) -> int:
        counted = self.client.query(table, filter="", output_fields=["count(*)"])
        return int(counted[0]["count(*)"])

    def insert(self, ids: np.ndarray, columns: dict[str, Any], table: str | None = None) -> None:
        """Rows ``ids`` with their ``columns``, ``ROWS_PER_REQUEST`` per insert."""
        self.send(self.client.insert, table or self.name, ids, columns)

    def replace(self, ids: np.ndarray, columns: dict[str, Any]) -> None:
        """Rows ``ids`` with their ``columns``, ``ROWS_PER_REQUEST`` per upsert (a row of the same id replaced)."""
        self.send(self.client.upsert, self.name, ids, columns)

    @staticmethod
    def send(request: Callable[[str, list[dict[str, Any]]], Any], table: str, ids: np.ndarray, columns: dict) -> None:
        """``request(table, rows)`` (Milvus' insert or upsert) for the rows ``ids``, ``ROWS_PER_REQUEST`` at a time."""
        columns = {name: values.tolist() if name in ("mu", "logvar") else values for name, values in columns.items()}
        for start in range(0, len(ids), ROWS_PER_REQUEST):
            rows = range(start, min(start + ROWS_PER_REQUEST, len(ids)))
            chunk = [{"id": int(ids[row]), **{name: values[row] for name, values in columns.items()}} for row in rows]
            request(table, chunk)

    def read_page(self, first_id: int, cursor: int | None) -> tuple[list[dict[str, Any]], int | None]:
        """Rows in id ranges of ``MAX_HITS`` (the most rows a Milvus query returns)."""
        start = first_id if cursor is None else cursor
        page = self.client.query(
            self.name,
            filter=f"id >= {start} and id < {start + MAX_HITS}",
            output_fields=READ_FIELDS,
        )
        # a plain list: pymilvus's result materialises its rows lazily and breaks once pages are appended to it
        return list(page), (start + MAX_HITS if page else None)

    def read_ids(self, ids: np.ndarray) -> list[dict[str, Any]]:
        """The rows ``ids``, ``ROWS_PER_REQUEST`` per query."""
        rows = []
        for start in range(0, len(ids), ROWS_PER_REQUEST):
            wanted = ids[start : start + ROWS_PER_REQUEST].tolist()
            rows += list(self.client.query(self.name, filter=f"id in {wanted}", output_fields=READ_FIELDS))
        return rows

    def search(
        self, vectors: np.ndarray, count: int, direction: str, first_id=0, ann=None, options=None, end_id=None
    ) -> list:
        """Largest ``IP`` (through the HNSW index of ``ann``, ``ef`` = ``ef_search``)."""
        params: dict[str, Any] = {"metric_type": "IP"}
        if ann is not None:
            params["params"] = {"ef": max(options["ef_search"], count)}
        found = self.client.search(
            self.name if ann is None else ann.table,
            data=list(vectors),
            anns_field=self.map_fields[direction] if ann is None else "vector",
            limit=count,
            output_fields=["id"],
            filter=database.id_range(first_id, end_id),
            search_params=params,
        )
        return [[hit["id"] for hit in row] for row in found]


class MilvusFlat(DatabaseBackend):
    """``backend="milvus"``: the Milvus collection at the ``uri`` option, searched by a flat raw inner-product scan."""

    name = MILVUS
    store_class = MilvusStore


class MilvusHnsw(MilvusFlat):
    """``backend="milvus-hnsw"``: the Milvus collection at the ``uri`` option, searched by its HNSW index on the lifted
    maps."""

    name = MILVUS_HNSW
    approximate = True
