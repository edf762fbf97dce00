"""The Milvus backends of ``GaussianIndex``: the Gaussians, the sentences and their raw inner-product vectors in a
Milvus collection, searched with the metric ``IP``.

``uri``: a Milvus Lite file (a path ending in ``.db``: Milvus embedded in this process, no server) or the URL of a
Milvus server (``http://localhost:19530``); ``#name`` after it picks the collection (default ``gaussians``; letters,
digits and ``_``).

One row per stored item: ``id`` (its position, the primary key), ``mu`` and ``logvar`` (float arrays, read back for
the exact re-score), ``sentence`` (or null), and the raw ``stored_map`` vectors ``entailing_vector`` = B(x) and
``entailed_by_vector`` = A(x) (2d + 2 values; 3d + 2 with the search score's [μ/‖μ‖, ·]). A query is sent as its
``query_map`` (−A(q) or −B(q), scaled to unit length), so the largest ``IP`` is the smallest KL or the highest search
score. The collection's properties hold the index settings and the id drawn at its creation
(``gausscse.search.backends.database``).

Exact (``"milvus"``): a ``FLAT`` index under ``IP`` (every row scanned). A Milvus search returns at most 16,384 hits
per query; a longer shortlist is left to the index's own exact scan. Approximate (``"milvus-hnsw"``): Milvus's HNSW
index, which on the raw vectors finds few of the true neighbours (their norms differ from row to row by design, as
for FAISS HNSW and LanceDB IVF), so it is built on the lifted vectors of ``gausscse.search.lift`` in one more
collection per direction (``<name>_ann_entailing``, ``<name>_ann_entailed_by``, the transform in its properties).
Every lifted stored vector has the same norm R, so ``IP`` on them ranks as L2 does and the graph is a plain
nearest-neighbour graph: still raw inner product, never cosine. ``ef_search`` is HNSW's ``ef``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gausscse.model.gaussian import GaussianEmbeddings, search_map_width, stored_map
from gausscse.search.backends import database
from gausscse.search.backends.database import AnnTable, ApproximateSearch, CollectionStore, DatabaseBackend
from gausscse.search.lift import fit_lift

MILVUS, MILVUS_HNSW = "milvus", "milvus-hnsw"
VECTOR_FIELDS = {"entailing": "entailing_vector", "entailed_by": "entailed_by_vector"}
MAX_SENTENCE_BYTES = 65535  # Milvus's longest VARCHAR
MAX_HITS = 16384  # Milvus's most hits per query (topk), and most rows per query
ROWS_PER_REQUEST = 2048
HNSW_NEIGHBOURS = 32  # graph degree M of the ANN collections
HNSW_EF_CONSTRUCTION = 64
COLLECTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def milvus_module():
    """pymilvus, imported where the Milvus backends are used (with milvus-lite for the local files)."""
    return database.engine_module("pymilvus", "pymilvus milvus-lite")


@database.one_client_per_place("Milvus")
def connect(place: str):
    """The ``MilvusClient`` of ``place`` (a Milvus Lite file or a server URL)."""
    return milvus_module().MilvusClient(uri=place)


class MilvusStore(CollectionStore):
    """One index's collection in a Milvus database at ``uri`` (module docstring)."""

    kind = "Milvus collection"
    backend = MILVUS
    default_suffix = ".milvus.db"
    place = "a Milvus Lite file ending in .db or a server URL, with an optional #collection"
    max_shortlist = MAX_HITS
    connect = staticmethod(connect)

    @staticmethod
    def exists(client, name: str) -> bool:
        return client.has_collection(name)

    @staticmethod
    def metadata(client, name: str) -> dict[str, Any]:
        """The properties ``SETTINGS_KEY`` and ``ANN_KEY``, JSON decoded (left out where they are not JSON)."""
        properties = client.describe_collection(name).get("properties", {})
        decoded = {}
        for key in (database.SETTINGS_KEY, database.ANN_KEY):
            try:
                decoded[key] = json.loads(properties[key])
            except (KeyError, TypeError, ValueError):
                continue
        return decoded

    @classmethod
    def is_database(cls, path: Path) -> bool:
        return path.name.endswith(".db") and path.exists()

    @classmethod
    def check_uri(cls, place: str, name: str) -> None:
        if not database.is_server(place) and not place.endswith(".db"):
            raise ValueError(f"uri {place}: a Milvus database is a Milvus Lite file ending in .db or a server URL")
        if not COLLECTION_NAME.fullmatch(name):
            raise ValueError(f"uri {place}#{name}: a Milvus collection name is letters, digits and '_', got {name!r}")

    @classmethod
    def create(cls, uri: str, settings: dict[str, Any]) -> MilvusStore:
        cls.check_new(uri)
        data_type = milvus_module().DataType
        place, name = database.split_uri(uri)
        client = connect(place)
        dim, width = settings["dim"], search_map_width(settings["dim"], settings.get("kl_weight"))
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", data_type.INT64, is_primary=True)
        for field in ("mu", "logvar"):
            schema.add_field(field, data_type.ARRAY, element_type=data_type.FLOAT, max_capacity=dim)
        schema.add_field("sentence", data_type.VARCHAR, max_length=MAX_SENTENCE_BYTES, nullable=True)
        index_params = client.prepare_index_params()
        for field in VECTOR_FIELDS.values():
            schema.add_field(field, data_type.FLOAT_VECTOR, dim=width)
            index_params.add_index(field_name=field, index_type="FLAT", metric_type="IP")
        properties = {database.SETTINGS_KEY: json.dumps(settings)}
        client.create_collection(
            name, schema=schema, index_params=index_params, consistency_level="Strong", properties=properties
        )
        return cls(uri, settings)

    def check_schema(self) -> None:
        """The vector fields (the maps' width) and the float arrays (d)."""
        width = search_map_width(self.dim, self.kl_weight)
        expected = {**dict.fromkeys(VECTOR_FIELDS.values(), width), "mu": self.dim, "logvar": self.dim}
        params = {
            field["name"]: field.get("params", {}) for field in self.client.describe_collection(self.name)["fields"]
        }
        found = {name: params.get(name, {}).get("dim", params.get(name, {}).get("max_capacity")) for name in expected}
        if found != expected:
            raise ValueError(
                f"{self.uri}: Milvus collection {self.name!r} has the field sizes {found}; its GaussianIndex settings "
                f"(d = {self.dim}, kl_weight = {self.kl_weight}) need {expected}"
            )

    def changed(self, known_rows: int) -> bool:
        counted = self.client.query(self.name, filter="", output_fields=["count(*)"])
        return int(counted[0]["count(*)"]) != known_rows

    def append(self, embeddings: GaussianEmbeddings, first_id: int, sentences: Sequence[str] | None) -> None:
        """One insert per ``ROWS_PER_REQUEST`` rows."""
        sentences = database.check_sentences(sentences, len(embeddings.mu))
        too_long = [row for row, text in enumerate(sentences) if text and len(text.encode()) > MAX_SENTENCE_BYTES]
        if too_long:
            raise ValueError(f"sentences[{too_long[0]}] is longer than Milvus keeps ({MAX_SENTENCE_BYTES} bytes)")
        mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
        columns = {"mu": mu.numpy().tolist(), "logvar": logvar.numpy().tolist(), "sentence": sentences}
        for direction, field in VECTOR_FIELDS.items():
            columns[field] = stored_map(mu, logvar, direction, self.kl_weight).float().numpy()
        for start in range(0, len(mu), ROWS_PER_REQUEST):
            stop = min(start + ROWS_PER_REQUEST, len(mu))
            rows = [
                {"id": first_id + row, **{name: values[row] for name, values in columns.items()}}
                for row in range(start, stop)
            ]
            self.client.insert(self.name, rows)

    def read(self, first_id: int = 0) -> tuple[GaussianEmbeddings, list[str | None]]:
        """Read in id ranges of ``MAX_HITS`` (the most rows a Milvus query returns)."""
        rows: list[dict[str, Any]] = []
        start = first_id
        while True:
            page = self.client.query(
                self.name,
                filter=f"id >= {start} and id < {start + MAX_HITS}",
                output_fields=["id", "mu", "logvar", "sentence"],
            )
            rows.extend(page)
            if not page:
                break
            start += MAX_HITS
        columns = {name: [row[name] for row in rows] for name in ("mu", "logvar", "sentence")}
        where = f"{self.uri} collection {self.name!r}"
        return database.gaussians_in_id_order([row["id"] for row in rows], columns, first_id, self.dim, where)

    def search(self, collection: str, field: str, vectors: np.ndarray, count: int, **request: Any) -> torch.Tensor:
        """``(Q, count)`` ids of the rows of ``collection`` of largest ``IP`` in ``field`` with each row of ``vectors``
        (−1 where fewer came back); ``request``: more arguments of ``MilvusClient.search`` (``filter``,
        ``search_params``)."""

        def search(chunk: np.ndarray) -> list[list[int]]:
            found = self.client.search(
                collection, data=list(chunk), anns_field=field, limit=count, output_fields=["id"], **request
            )
            return [[hit["id"] for hit in row] for row in found]

        return database.batched_hits(vectors, count, search)

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str, first_id: int = 0) -> torch.Tensor:
        """A ``FLAT`` ``IP`` search."""
        vectors = database.flat_query_vectors(queries, direction, self.kl_weight)
        only_later = f"id >= {first_id}" if first_id else ""
        params = {"metric_type": "IP"}
        return self.search(self.name, VECTOR_FIELDS[direction], vectors, count, filter=only_later, search_params=params)

    def write_ann(self, embeddings: GaussianEmbeddings, direction: str) -> AnnTable:
        """The collection ``<name>_ann_<direction>`` (replacing an older one) under an ``IP`` HNSW index."""
        data_type = milvus_module().DataType
        transform, inliers, vectors = fit_lift(embeddings, direction, self.kl_weight)
        name = self.ann_name(direction)
        if self.client.has_collection(name):
            self.client.drop_collection(name)
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", data_type.INT64, is_primary=True)
        schema.add_field("vector", data_type.FLOAT_VECTOR, dim=vectors.shape[1])
        index_params = self.client.prepare_index_params()
        graph = {"M": HNSW_NEIGHBOURS, "efConstruction": HNSW_EF_CONSTRUCTION}
        index_params.add_index(field_name="vector", index_type="HNSW", metric_type="IP", params=graph)
        properties = {database.ANN_KEY: json.dumps(database.transform_metadata(transform, len(embeddings.mu)))}
        self.client.create_collection(
            name, schema=schema, index_params=index_params, consistency_level="Strong", properties=properties
        )
        for start in range(0, len(inliers), ROWS_PER_REQUEST):
            ids, chunk = inliers[start : start + ROWS_PER_REQUEST], vectors[start : start + ROWS_PER_REQUEST]
            self.client.insert(
                name, [{"id": int(row), "vector": vector} for row, vector in zip(ids, chunk, strict=True)]
            )
        return AnnTable(name, transform, len(embeddings.mu))

    def ann_search(self, ann: AnnTable, vectors: np.ndarray, count: int, options: dict[str, int]) -> torch.Tensor:
        """HNSW's ``ef`` = the index's ``ef_search`` (at least ``count``)."""
        params = {"metric_type": "IP", "params": {"ef": max(options["ef_search"], count)}}
        return self.search(ann.table, "vector", vectors, count, search_params=params)


class MilvusFlat(DatabaseBackend):
    """``backend="milvus"``: the Gaussians, sentences and both maps in a Milvus collection at the ``uri`` option
    (``gausscse.search.backends.database.DatabaseBackend``), the shortlist from a ``FLAT`` ``IP`` search."""

    name = MILVUS
    store_class = MilvusStore


class MilvusHnsw(ApproximateSearch, MilvusFlat):
    """``backend="milvus-hnsw"``: the same collection searched through Milvus's HNSW index (``ef_search``) on the
    lifted maps, in one more collection per direction (module docstring)."""

    name = MILVUS_HNSW


__all__ = ["MILVUS", "MILVUS_HNSW", "MilvusFlat", "MilvusHnsw", "MilvusStore"]
