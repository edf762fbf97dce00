"""The Qdrant backends of ``GaussianIndex``: the Gaussians, the sentences and their raw inner-product vectors in a
Qdrant collection, searched with ``Distance.DOT``.

``uri``: a local folder (Qdrant's embedded mode, no server), ``":memory:"`` (one in-memory store per process) or the
``http(s)://`` URL of a Qdrant server; ``#name`` after it picks the collection (default ``gaussians``). One client per
place per process (Qdrant's embedded mode locks its folder to one client).

One point per stored item, its id the item's position: named vectors ``entailing`` = B(x) and ``entailed_by`` = A(x)
(the raw ``stored_map`` vectors, 2d + 2 values; 3d + 2 with the search score's [μ/‖μ‖, ·]) and ``mu``, ``logvar``
(the Gaussian, read back for the exact re-score; never searched), payload ``id`` and ``sentence``. A query is sent as
its ``query_map`` (−A(q) or −B(q), scaled to unit length), so the largest ``DOT`` is the smallest KL or the highest
search score. The collection's metadata holds the index settings and the id drawn at its creation
(``gausscse.search.backends.database``).

Exact (``"qdrant"``): a flat scan (``SearchParams(exact=True)``; no HNSW graph is built for the collection:
``m=0``). Approximate (``"qdrant-hnsw"``): Qdrant's HNSW graph, which on the raw vectors finds few of the true
neighbours (their norms differ from row to row by design, as for FAISS HNSW and LanceDB IVF), so it is built on the
lifted vectors of ``gausscse.search.lift`` in one more collection per direction (``<name>_ann_entailing``,
``<name>_ann_entailed_by``, the transform in its metadata). Every lifted stored vector has the same norm R, so
``DOT`` on them ranks as L2 does and the graph is a plain nearest-neighbour graph: still raw inner product, never
cosine. ``ef_search`` is Qdrant's ``hnsw_ef``. Qdrant's embedded mode searches every point whatever the parameters
(it has no HNSW), so there the approximate backend is exact; a server runs the graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gausscse.model.gaussian import GaussianEmbeddings, search_map_width, stored_map
from gausscse.search.backends import database
from gausscse.search.backends.database import MEMORY, AnnTable, ApproximateSearch, CollectionStore, DatabaseBackend
from gausscse.search.lift import fit_lift

QDRANT, QDRANT_HNSW = "qdrant", "qdrant-hnsw"
MAP_VECTORS = ("entailing", "entailed_by")  # the named vectors of the stored maps, one per search direction
GAUSSIAN_VECTORS = ("mu", "logvar")
POINTS_PER_REQUEST = 512
HNSW_NEIGHBOURS = 32  # graph degree m of the ANN collections
HNSW_EF_CONSTRUCTION = 64


def qdrant_models():
    """``qdrant_client.models``, imported where the Qdrant backends are used."""
    return database.engine_module("qdrant_client.models", "qdrant-client")


@database.one_client_per_place("Qdrant")
def connect(place: str):
    """The ``QdrantClient`` of ``place`` (``":memory:"``, a server URL or a local folder)."""
    client_class = database.engine_module("qdrant_client", "qdrant-client").QdrantClient
    if place == MEMORY:
        return client_class(location=MEMORY)
    return client_class(url=place) if database.is_server(place) else client_class(path=place)


class QdrantStore(CollectionStore):
    """One index's collection in a Qdrant database at ``uri`` (module docstring)."""

    kind = "Qdrant collection"
    backend = QDRANT
    default_suffix = ".qdrant"
    place = "a Qdrant folder, ':memory:' or server URL, with an optional #collection"
    connect = staticmethod(connect)

    def __init__(self, uri: str, settings: dict[str, Any]):
        super().__init__(uri, settings)
        self.remote = database.is_server(self.folder)

    @staticmethod
    def exists(client, name: str) -> bool:
        return client.collection_exists(name)

    @staticmethod
    def metadata(client, name: str) -> dict[str, Any]:
        return client.get_collection(name).config.metadata or {}

    @classmethod
    def is_database(cls, path: Path) -> bool:
        return (path / "meta.json").is_file()

    @classmethod
    def create(cls, uri: str, settings: dict[str, Any]) -> QdrantStore:
        cls.check_new(uri)
        models = qdrant_models()
        place, name = database.split_uri(uri)
        dim, width = settings["dim"], search_map_width(settings["dim"], settings.get("kl_weight"))
        vectors = {
            **{vector: models.VectorParams(size=width, distance=models.Distance.DOT) for vector in MAP_VECTORS},
            **{vector: models.VectorParams(size=dim, distance=models.Distance.DOT) for vector in GAUSSIAN_VECTORS},
        }
        no_graph = models.HnswConfigDiff(m=0)  # scanned exactly: a graph would only cost
        client = connect(place)
        client.create_collection(
            name, vectors_config=vectors, hnsw_config=no_graph, metadata={database.SETTINGS_KEY: settings}
        )
        if database.is_server(place):  # the flat scan of rows added after an ANN build filters on it
            client.create_payload_index(name, "id", models.PayloadSchemaType.INTEGER)
        return cls(uri, settings)

    @classmethod
    def check_new(cls, uri: str | Path) -> None:
        """Also refused: a local folder that holds something else than a Qdrant database."""
        folder = cls.local_path(uri)
        if folder is not None and folder.exists() and not (cls.is_database(folder) or not any(folder.iterdir())):
            held = (
                f"holds {', '.join(sorted(p.name for p in folder.iterdir())[:4])}" if folder.is_dir() else "is a file"
            )
            raise FileExistsError(f"{folder} {held}: a Qdrant database needs a new or empty folder, or a Qdrant one")
        super().check_new(uri)

    def check_schema(self) -> None:
        """The named ``DOT`` vectors: both maps (their width) and the Gaussian (d)."""
        vectors = self.client.get_collection(self.name).config.params.vectors
        width = search_map_width(self.dim, self.kl_weight)
        expected = {**dict.fromkeys(MAP_VECTORS, width), **dict.fromkeys(GAUSSIAN_VECTORS, self.dim)}
        found = {
            name: params.size
            for name, params in (vectors if isinstance(vectors, dict) else {}).items()
            if params.distance == qdrant_models().Distance.DOT
        }
        if found != expected:
            raise ValueError(
                f"{self.uri}: Qdrant collection {self.name!r} holds the DOT vectors {found}; its GaussianIndex "
                f"settings (d = {self.dim}, kl_weight = {self.kl_weight}) need {expected}"
            )

    def changed(self, known_rows: int) -> bool:
        return self.client.count(self.name, exact=True).count != known_rows

    def id_filter(self, first_id: int):
        """The points of id ``first_id`` on (``None``: all)."""
        if not first_id:
            return None
        models = qdrant_models()
        return models.Filter(must=[models.FieldCondition(key="id", range=models.Range(gte=first_id))])

    def append(self, embeddings: GaussianEmbeddings, first_id: int, sentences: Sequence[str] | None) -> None:
        """One upsert per ``POINTS_PER_REQUEST`` points."""
        sentences = database.check_sentences(sentences, len(embeddings.mu))
        mu, logvar = embeddings.mu.cpu(), embeddings.logvar.cpu()
        vectors = {
            direction: stored_map(mu, logvar, direction, self.kl_weight).float().numpy() for direction in MAP_VECTORS
        }
        vectors.update(mu=mu.numpy(), logvar=logvar.numpy())
        for start in range(0, len(mu), POINTS_PER_REQUEST):
            rows = slice(start, start + POINTS_PER_REQUEST)
            ids = list(range(first_id + start, first_id + min(start + POINTS_PER_REQUEST, len(mu))))
            payloads = [{"id": point, "sentence": text} for point, text in zip(ids, sentences[rows], strict=True)]
            chunk = {name: values[rows] for name, values in vectors.items()}
            batch = qdrant_models().Batch(ids=ids, vectors=chunk, payloads=payloads)
            self.client.upsert(self.name, points=batch, wait=True)

    def read(self, first_id: int = 0) -> tuple[GaussianEmbeddings, list[str | None]]:
        points, offset = [], None
        while True:
            page, offset = self.client.scroll(
                self.name,
                scroll_filter=self.id_filter(first_id),
                limit=POINTS_PER_REQUEST,
                offset=offset,
                with_payload=["sentence"],
                with_vectors=list(GAUSSIAN_VECTORS),
            )
            points.extend(page)
            if offset is None:
                break
        columns = {name: [point.vector[name] for point in points] for name in GAUSSIAN_VECTORS}
        columns["sentence"] = [point.payload.get("sentence") for point in points]
        where = f"{self.uri} collection {self.name!r}"
        return database.gaussians_in_id_order([point.id for point in points], columns, first_id, self.dim, where)

    def query(self, collection: str, vectors: np.ndarray, count: int, **request: Any) -> torch.Tensor:
        """``(Q, count)`` ids of the points of ``collection`` of largest ``DOT`` with each row of ``vectors`` (−1 where
        fewer came back); ``request``: more fields of Qdrant's ``QueryRequest`` (``using``, ``filter``, ``params``)."""
        models = qdrant_models()

        def search(chunk: np.ndarray) -> list[list[int]]:
            requests = [models.QueryRequest(query=row, limit=count, with_payload=False, **request) for row in chunk]
            responses = self.client.query_batch_points(collection, requests=requests)
            return [[point.id for point in response.points] for response in responses]

        return database.batched_hits(vectors, count, search)

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str, first_id: int = 0) -> torch.Tensor:
        """A flat ``DOT`` scan (on a server ``exact=True``; the embedded mode always scans)."""
        params = qdrant_models().SearchParams(exact=True) if self.remote else None
        vectors = database.flat_query_vectors(queries, direction, self.kl_weight)
        return self.query(self.name, vectors, count, using=direction, filter=self.id_filter(first_id), params=params)

    def write_ann(self, embeddings: GaussianEmbeddings, direction: str) -> AnnTable:
        """The collection ``<name>_ann_<direction>`` (replacing an older one) under an HNSW graph, ``DOT``."""
        models = qdrant_models()
        transform, inliers, vectors = fit_lift(embeddings, direction, self.kl_weight)
        name = self.ann_name(direction)
        if self.client.collection_exists(name):
            self.client.delete_collection(name)
        self.client.create_collection(
            name,
            vectors_config=models.VectorParams(size=vectors.shape[1], distance=models.Distance.DOT),
            hnsw_config=models.HnswConfigDiff(m=HNSW_NEIGHBOURS, ef_construct=HNSW_EF_CONSTRUCTION),
            metadata={database.ANN_KEY: database.transform_metadata(transform, len(embeddings.mu))},
        )
        for start in range(0, len(inliers), POINTS_PER_REQUEST):
            rows = slice(start, start + POINTS_PER_REQUEST)
            self.client.upsert(name, points=models.Batch(ids=inliers[rows].tolist(), vectors=vectors[rows]), wait=True)
        return AnnTable(name, transform, len(embeddings.mu))

    def ann_search(self, ann: AnnTable, vectors: np.ndarray, count: int, options: dict[str, int]) -> torch.Tensor:
        """``hnsw_ef`` = the index's ``ef_search`` (at least ``count``)."""
        params = qdrant_models().SearchParams(hnsw_ef=max(options["ef_search"], count)) if self.remote else None
        return self.query(ann.table, vectors, count, params=params)


class QdrantFlat(DatabaseBackend):
    """``backend="qdrant"``: the Gaussians, sentences and both maps in a Qdrant collection at the ``uri`` option
    (``gausscse.search.backends.database.DatabaseBackend``), the shortlist from an exact ``DOT`` scan."""

    name = QDRANT
    store_class = QdrantStore


class QdrantHnsw(ApproximateSearch, QdrantFlat):
    """``backend="qdrant-hnsw"``: the same collection searched through Qdrant's HNSW graph (``ef_search``) on the
    lifted maps, in one more collection per direction (module docstring)."""

    name = QDRANT_HNSW


__all__ = ["QDRANT", "QDRANT_HNSW", "QdrantFlat", "QdrantHnsw", "QdrantStore"]
