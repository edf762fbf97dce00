"""The Qdrant backends: ``"qdrant"`` (a flat ``Distance.DOT`` scan) and ``"qdrant-hnsw"`` (Qdrant's HNSW graph on
the lifted maps, ``hnsw_ef`` = ``ef_search``; the embedded mode has no graph and scans every point). ``uri``: a local
folder, ``":memory:"`` or a server URL, ``#name`` picking the collection. A point: named vectors ``entailing``,
``entailed_by`` (the stored maps), ``mu`` and ``logvar``; payload ``id`` and ``sentence``."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

from gausscse.model.gaussian import SEARCH_DIRECTIONS
from gausscse.search.backends import database
from gausscse.search.backends.base import HNSW_EF_CONSTRUCTION, HNSW_NEIGHBOURS, engine_module
from gausscse.search.backends.database import MEMORY, CollectionStore, DatabaseBackend

QDRANT, QDRANT_HNSW = "qdrant", "qdrant-hnsw"
POINTS_PER_REQUEST = 512
LOCK_KEY = "gausscse_writer"  # the metadata entry of the writers' lock collection: its holder
MAP_VECTORS = {direction: direction for direction in SEARCH_DIRECTIONS}  # the named vectors of the stored maps


def qdrant_models():
    return engine_module("qdrant_client.models", "qdrant-client")


class QdrantStore(CollectionStore):
    """One index's collection in a Qdrant database (module docstring)."""

    kind = "Qdrant collection"

    backend_name = "qdrant"
    default_suffix = ".qdrant"
    place = "a Qdrant folder, ':memory:' or server URL, with an optional #collection"
    map_fields = MAP_VECTORS
    new_place = "a Qdrant database needs a new or empty folder, or a Qdrant one"

    @staticmethod
    @functools.cache
    def connect(place: str):
        """The ``QdrantClient`` of ``place`` (``":memory:"``, a server URL or a local folder)."""
        client_class = engine_module("qdrant_client", "qdrant-client").QdrantClient
        if place == MEMORY:
            return client_class(location=MEMORY)
        return client_class(url=place) if database.is_server(place) else client_class(path=place)

    @staticmethod
    def exists(client, name: str) -> bool:
        return client.collection_exists(name)

    @staticmethod
    def metadata(client, name: str) -> dict[str, Any]:
        return client.get_collection(name).config.metadata or {}

    @classmethod
    def is_database(cls, path: Path) -> bool:
        return (path / "meta.json").is_file()

    def new_collection(self, settings: dict[str, Any]) -> None:
        models = qdrant_models()
        dot = models.Distance.DOT
        vectors = {name: models.VectorParams(size=size, distance=dot) for name, size in self.sizes().items()}
        no_graph = models.HnswConfigDiff(m=0)  # scanned exactly: a graph would only cost
        self.client.create_collection(
            self.name, vectors_config=vectors, hnsw_config=no_graph, metadata={database.SETTINGS_KEY: settings}
        )
        if database.is_server(self.folder):  # the flat scan of rows added after an ANN build filters on it
            self.client.create_payload_index(self.name, "id", models.PayloadSchemaType.INTEGER)

    def new_ann_collection(self, name: str, width: int, metadata: dict[str, Any]) -> None:
        models = qdrant_models()
        self.client.create_collection(
            name,
            vectors_config=models.VectorParams(size=width, distance=models.Distance.DOT),
            hnsw_config=models.HnswConfigDiff(m=HNSW_NEIGHBOURS, ef_construct=HNSW_EF_CONSTRUCTION),
            metadata=metadata,
        )

    def drop(self, name: str) -> None:
        self.client.delete_collection(name)

    def new_lock(self, name: str, holder: str) -> None:
        one = qdrant_models().VectorParams(size=1, distance=qdrant_models().Distance.DOT)
        self.client.create_collection(name, vectors_config=one, metadata={LOCK_KEY: holder})

    def lock_holder(self, name: str) -> str | None:
        return self.metadata(self.client, name).get(LOCK_KEY) if self.exists(self.client, name) else None

    def vector_sizes(self) -> dict[str, int]:
        """The sizes of the collection's named ``DOT`` vectors."""
        vectors = self.client.get_collection(self.name).config.params.vectors
        named, dot = vectors if isinstance(vectors, dict) else {}, qdrant_models().Distance.DOT
        return {name: params.size for name, params in named.items() if params.distance == dot}

    def write_settings(self, settings: dict[str, Any]) -> None:
        self.client.update_collection(self.name, metadata={database.SETTINGS_KEY: settings})

    def delete_from(self, first_id: int) -> None:
        selector = qdrant_models().FilterSelector(filter=self.id_filter(first_id) or qdrant_models().Filter())
        self.client.delete(self.name, points_selector=selector, wait=True)

    def row_count(self, table: str) -> int:
        return self.client.count(table, exact=True).count

    def id_filter(self, first_id: int, end_id: int | None = None):
        """The points of id ``first_id`` up to ``end_id`` (``None``: all)."""
        if not first_id and end_id is None:
            return None
        models = qdrant_models()
        bounds = models.Range(gte=first_id or None, lt=end_id)
        return models.Filter(must=[models.FieldCondition(key="id", range=bounds)])

    def insert(self, ids: np.ndarray, columns: dict[str, Any], table: str | None = None) -> None:
        """Points ``ids``, ``POINTS_PER_REQUEST`` per upsert: the named vectors of ``columns``, or an ANN
        collection's one ``vector``; payload ``id`` and ``sentence`` where ``columns`` hold sentences."""
        columns = dict(columns)
        sentences = columns.pop("sentence", None)
        vectors = columns.pop("vector", columns)
        payloads = sentences and [{"id": int(i), "sentence": text} for i, text in zip(ids, sentences, strict=True)]
        for start in range(0, len(ids), POINTS_PER_REQUEST):
            rows = slice(start, start + POINTS_PER_REQUEST)
            batch = qdrant_models().Batch(
                ids=ids[rows].tolist(),
                vectors={name: values[rows] for name, values in vectors.items()} if columns else vectors[rows],
                payloads=None if payloads is None else payloads[rows],
            )
            self.client.upsert(table or self.name, points=batch, wait=True)

    def replace(self, ids: np.ndarray, columns: dict[str, Any]) -> None:
        """[`insert`]: Qdrant's upsert already writes a point over the point of the same id."""
        self.insert(ids, columns)

    def read_page(self, first_id: int, cursor: Any) -> tuple[list[dict[str, Any]], Any]:
        page, cursor = self.client.scroll(
            self.name,
            scroll_filter=self.id_filter(first_id),
            limit=POINTS_PER_REQUEST,
            offset=cursor,
            with_payload=["sentence"],
            with_vectors=["mu", "logvar"],
        )
        return [{"id": point.id, **point.vector, "sentence": point.payload.get("sentence")} for point in page], cursor

    def read_ids(self, ids: np.ndarray) -> list[dict[str, Any]]:
        """The points ``ids``, ``POINTS_PER_REQUEST`` per retrieve."""
        rows = []
        for start in range(0, len(ids), POINTS_PER_REQUEST):
            points = self.client.retrieve(
                self.name,
                ids=ids[start : start + POINTS_PER_REQUEST].tolist(),
                with_payload=["sentence"],
                with_vectors=["mu", "logvar"],
            )
            rows += [{"id": point.id, **point.vector, "sentence": point.payload.get("sentence")} for point in points]
        return rows

    def search(
        self, vectors: np.ndarray, count: int, direction: str, first_id=0, ann=None, options=None, end_id=None
    ) -> list:
        """The ``DOT`` query of each row (the embedded mode always scans; a server searches the ANN graph with
        ``hnsw_ef`` = ``ef_search``)."""
        models = qdrant_models()
        if ann is None:
            collection, request = self.name, {"using": direction, "filter": self.id_filter(first_id, end_id)}
            params = models.SearchParams(exact=True)
        else:
            collection, request = ann.table, {}
            params = models.SearchParams(hnsw_ef=max(options["ef_search"], count))
        request["params"] = params if database.is_server(self.folder) else None
        requests = [models.QueryRequest(query=row, limit=count, with_payload=False, **request) for row in vectors]
        return [[point.id for point in hits.points] for hits in self.client.query_batch_points(collection, requests)]


class QdrantFlat(DatabaseBackend):
    """``backend="qdrant"``: the Qdrant collection at the ``uri`` option, searched by a flat raw inner-product scan."""

    name = QDRANT
    store_class = QdrantStore


class QdrantHnsw(QdrantFlat):
    """``backend="qdrant-hnsw"``: the Qdrant collection at the ``uri`` option, searched by its HNSW index on the lifted
    maps."""

    name = QDRANT_HNSW
    approximate = True
