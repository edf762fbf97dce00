"""What the database backends of ``GaussianIndex`` share (LanceDB, Qdrant, Milvus): the backend around a store, the
writers' lock, the store's id and settings checks, and the approximate search on lifted vectors.

A database backend keeps one index in one table or collection of a database at its ``uri`` (``place#name`` picks the
collection of the Qdrant and Milvus backends; default ``gaussians``). Every row holds an item's id (its position),
μ, log σ², sentence and the two raw ``stored_map`` vectors; the settings (d, reduction, ``kl_weight``, backend and a
``table_id`` drawn at creation) live in the table's own metadata, so the backend's ``open(uri)`` rebuilds the index
from the database alone. The index keeps the Gaussians in memory in id order and re-scores every shortlist exactly;
the database gives the shortlists: a flat raw inner-product scan (exact), or its own ANN index (HNSW, IVF) on the
vectors of ``gausscse.search.lift`` kept in one more table per direction, built at the first approximate search and
rebuilt once the rows added later outnumber the indexed ones (rows added meanwhile are scanned flat).

[`DatabaseStore`] is the engine-specific part (one subclass per engine), [`DatabaseBackend`] the backend around it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import tempfile
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch
from filelock import FileLock

from gausscse.io import first_line
from gausscse.model.gaussian import GaussianEmbeddings, query_map
from gausscse.search.backends.base import SearchBackend
from gausscse.search.lift import kept_columns, lifted_queries, unit_rows

if TYPE_CHECKING:
    from gausscse.search.index import GaussianIndex

DEFAULT_COLLECTION = "gaussians"
MEMORY = ":memory:"  # Qdrant's in-memory store
SETTINGS_KEY = "gausscse"  # the collection metadata (Qdrant) or property (Milvus) of the index settings
ANN_KEY = "gausscse_ann"  # that of an ANN collection: its lift transform, and how many rows it was built from
QUERIES_PER_REQUEST = 256
WRITE_LOCK = ".gausscse-write.lock"  # the file lock writers of one local database take (in its folder)
SEARCH_DIRECTIONS = ("entailing", "entailed_by")


def engine_module(module: str, package: str) -> Any:
    """``module`` of a database engine, imported where its backend is used; ``ImportError`` naming ``package``."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(f"this backend needs {module}: pip install {package}") from error


def one_client_per_place(engine: str) -> Callable[[Callable[[str], Any]], Callable[[str], Any]]:
    """Decorator of a function that opens the ``engine``'s client of a place: one client per place per process (the
    embedded modes lock their files to one client), the engine's errors in opening it as one ``ValueError``."""

    def decorate(open_client: Callable[[str], Any]) -> Callable[[str], Any]:
        @functools.cache
        def connect(place: str) -> Any:
            try:
                return open_client(place)
            except Exception as error:  # the client's own errors: a place another process holds, no server
                raise ValueError(f"{place}: {engine} cannot open it ({first_line(error)})") from None

        return functools.update_wrapper(connect, open_client)

    return decorate


def split_uri(uri: str | Path) -> tuple[str, str]:
    """``(place, collection)`` of a Qdrant or Milvus ``uri``: ``place#name`` names the collection, else
    ``DEFAULT_COLLECTION``."""
    place, _, name = str(uri).partition("#")
    return place, name or DEFAULT_COLLECTION


def is_server(place: str) -> bool:
    """Whether ``place`` is the URL of a database server (``http://``, ``https://``, ``tcp://``, ...)."""
    return "://" in place


def write_lock(place: str, folder: Path | None) -> FileLock:
    """The lock writers of the database at ``place`` hold while they number and write rows: a file in its local
    ``folder``, else (a server, an in-memory store) one in the temporary folder named after ``place`` (shared by the
    processes of this machine; writers on several machines must not add to one index at once)."""
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        return FileLock(str(folder / WRITE_LOCK))
    digest = hashlib.sha256(place.encode()).hexdigest()[:16]
    return FileLock(str(Path(tempfile.gettempdir()) / f"gausscse-{digest}.lock"))


def check_sentences(sentences: Sequence[str] | None, count: int) -> list[str | None]:
    """``sentences`` as a list of ``count`` strings (``None``: ``count`` nulls); ``ValueError`` otherwise."""
    if sentences is None:
        return [None] * count
    if isinstance(sentences, str) or len(sentences) != count:
        raise ValueError(f"sentences must be a list of {count} strings, one per Gaussian")
    kinds = {type(sentence).__name__ for sentence in sentences if not isinstance(sentence, str)}
    if kinds:
        raise ValueError(f"sentences must be strings, one per Gaussian; got {', '.join(sorted(kinds))}")
    return list(sentences)


def flat_query_vectors(queries: GaussianEmbeddings, direction: str, kl_weight: float | None) -> np.ndarray:
    """The queries' raw ``query_map`` rows for a flat inner-product scan, scaled to unit length in float64 (the
    ranking against the raw stored maps is the same; no float32 overflow for extreme variances)."""
    return unit_rows(query_map(queries.mu.cpu(), queries.logvar.cpu(), direction, kl_weight).numpy())


def in_id_order(ids: np.ndarray, first_id: int, where: str) -> np.ndarray:
    """The order that sorts the rows ``ids`` read from ``where``; ``ValueError`` unless they are ``first_id, ...``
    without a gap."""
    order = np.argsort(ids, kind="stable")
    if not np.array_equal(ids[order], np.arange(first_id, first_id + len(ids))):
        raise ValueError(f"{where}: the ids are not {first_id}..{first_id + len(ids) - 1}")
    return order


def transform_metadata(transform: dict[str, np.ndarray], rows: int) -> dict[str, Any]:
    """A lift transform (``gausscse.search.lift.fit_lift``) and the number of stored rows it was built from, as
    JSON values (kept in an ANN table's metadata)."""
    return {
        "mean": transform["mean"].tolist(),
        "scale": transform["scale"].tolist(),
        "radius2": float(transform["radius2"][0]),
        "outliers": transform["outliers"].tolist(),
        "rows": rows,
    }


def transform_from_metadata(
    metadata: dict[str, Any], direction: str, dim: int, kl_weight: float | None
) -> tuple[dict[str, np.ndarray], int]:
    """What [`transform_metadata`] wrote: the transform of ``direction`` (for Gaussians of dimension ``dim``) and the
    number of rows."""
    transform = {
        "keep": kept_columns(direction, dim, kl_weight),
        "mean": np.array(metadata["mean"], dtype=np.float64),
        "scale": np.array(metadata["scale"], dtype=np.float64),
        "radius2": np.array([metadata["radius2"]]),
        "outliers": np.array(metadata["outliers"], dtype=np.int64),
    }
    return transform, int(metadata["rows"])


def batched_hits(
    vectors: np.ndarray, count: int, search: Callable[[np.ndarray], Sequence[Sequence[int]]]
) -> torch.Tensor:
    """``(Q, count)`` ids found by ``search`` (one request: rows of ``vectors`` in, a list of ids per row out) for
    ``QUERIES_PER_REQUEST`` query vectors at a time; −1 where fewer came back."""
    ids = torch.full((len(vectors), count), -1, dtype=torch.long)
    for start in range(0, len(vectors), QUERIES_PER_REQUEST):
        for row, found in enumerate(search(vectors[start : start + QUERIES_PER_REQUEST]), start=start):
            found = list(found)[:count]
            ids[row, : len(found)] = torch.tensor(found, dtype=torch.long)
    return ids


def gaussians_in_id_order(
    ids: Sequence[int], columns: dict[str, Sequence[Any]], first_id: int, dim: int, where: str
) -> tuple[GaussianEmbeddings, list[str | None]]:
    """The Gaussians and sentences of rows read from ``where`` in any order: their ``ids`` and ``columns`` ``mu``,
    ``logvar`` (``dim`` floats per row) and ``sentence``, put in id order (``ValueError`` unless the ids are
    ``first_id, ...`` without a gap)."""
    order = in_id_order(np.array(ids, dtype=np.int64), first_id, where)

    def matrix(name: str) -> torch.Tensor:
        return torch.tensor(np.array(columns[name], dtype=np.float32).reshape(-1, dim)[order])

    return GaussianEmbeddings(matrix("mu"), matrix("logvar")), [columns["sentence"][row] for row in order]


@dataclass
class AnnTable:
    """One direction's ANN table: the engine's handle of it (``table``: a LanceDB table, a collection name), the lift
    transform its vectors were made with and the number of stored rows it was built from."""

    table: Any
    transform: dict[str, np.ndarray]
    rows: int


class DatabaseStore:
    """One index's rows in a database at ``uri``: rows in, shortlists out. An engine subclass implements the hooks
    marked so; the id and settings checks, the ANN tables' bookkeeping and the ANN shortlist are shared.

    Several handles (threads, processes) may share one database: writers hold [`writing`] and number their rows after
    the table's current last row, and every handle sees what the others wrote through [`refresh`]. ``table_id``: a
    random id drawn when the table was created, which a saved index records, so a database deleted and built again for
    another corpus is told apart from the one it was built on."""

    kind: ClassVar[str]  # what the engine calls it, for messages: "LanceDB table", "Qdrant collection", ...
    default_suffix: ClassVar[str]  # the default uri of the command line: INDEX + this suffix
    place: ClassVar[str]  # what the uri is, for messages
    max_shortlist: ClassVar[int | None] = None  # the most hits the engine returns per query

    def __init__(self, uri: str, settings: dict[str, Any]):
        self.uri = uri
        try:  # the stored maps' dimension and search score, and the table's identity
            self.dim, self.kl_weight, self.table_id = (
                int(settings["dim"]),
                settings.get("kl_weight"),
                settings.get("table_id"),
            )
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{uri}: the GaussianIndex settings of the {self.kind} have no valid 'dim'") from None
        self._ann: dict[str, AnnTable] | None = None  # read from the database at the first ANN search, then kept

    # the engine's hooks

    @classmethod
    def normalized(cls, uri: str | Path) -> str:
        """``uri`` as the index records it (a local path made absolute)."""
        return str(Path(uri).resolve())

    @classmethod
    def local_path(cls, uri: str | Path) -> Path | None:
        """The local folder or file of the database at ``uri`` (``None``: a server, an in-memory store)."""
        return Path(uri)

    @classmethod
    def create(cls, uri: str, settings: dict[str, Any]) -> DatabaseStore:
        """A new, empty table holding ``settings`` ([`check_new`] first: nothing stored is overwritten)."""
        raise NotImplementedError

    @classmethod
    def open(cls, uri: str | Path) -> tuple[DatabaseStore, dict[str, Any]]:
        """The table at ``uri`` and the settings stored with it; ``FileNotFoundError`` if there is none,
        ``ValueError`` if it is not a GaussianIndex table."""
        raise NotImplementedError

    @classmethod
    def holds(cls, uri: str | Path) -> bool:
        """Whether the local database at ``uri`` holds an index (looked at without any server)."""
        raise NotImplementedError

    @classmethod
    def check_new(cls, uri: str | Path) -> None:
        """``FileExistsError`` unless a new table can be made at ``uri``."""
        raise NotImplementedError

    def writing(self) -> FileLock:
        """The database's write lock (a context manager), held while rows are numbered and written."""
        raise NotImplementedError

    def stored_settings(self) -> dict[str, Any]:
        """The settings the database holds now; ``ValueError`` naming the uri if it cannot be read any more."""
        raise NotImplementedError

    def changed(self, known_rows: int) -> bool:
        """Whether other handles wrote since this one last read (it knows ``known_rows`` rows)."""
        raise NotImplementedError

    def append(self, embeddings: GaussianEmbeddings, first_id: int, sentences: Sequence[str] | None) -> None:
        """Rows ``first_id, ...`` for ``embeddings`` (float32, checked by the index) and their sentences. The caller
        holds [`writing`] and has read every row before ``first_id``."""
        raise NotImplementedError

    def read(self, first_id: int = 0) -> tuple[GaussianEmbeddings, list[str | None]]:
        """The stored Gaussians and sentences from id ``first_id`` on, in id order."""
        raise NotImplementedError

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str, first_id: int = 0) -> torch.Tensor:
        """``(Q, count)`` ids of the rows (from ``first_id`` on) of largest raw inner product ⟨query map, stored
        map⟩ (−1 where fewer came back): a flat scan."""
        raise NotImplementedError

    def read_ann(self) -> dict[str, AnnTable]:
        """The ANN tables of both directions in the database ({} if they were never built)."""
        raise NotImplementedError

    def write_ann(self, embeddings: GaussianEmbeddings, direction: str) -> AnnTable:
        """(Re)build the ANN table of ``direction`` from the stored Gaussians ``embeddings`` (all rows, id order)."""
        raise NotImplementedError

    def ann_search(self, ann: AnnTable, vectors: np.ndarray, count: int, options: dict[str, int]) -> torch.Tensor:
        """``(Q, count)`` ids of the ``count`` lifted vectors of ``ann`` nearest each lifted query ``vectors``
        through the engine's ANN index (``options``: the index's ``nprobes`` and ``ef_search``)."""
        raise NotImplementedError

    # shared

    def refresh(self, known_rows: int) -> bool:
        """``True`` when another handle wrote since this one last read (the ANN tables are then read again at the
        next ANN search). ``ValueError`` if the table is no longer the one this handle opened (the database was
        deleted and built again)."""
        stored = self.stored_settings()
        if stored.get("table_id") != self.table_id:
            raise ValueError(
                f"{self.uri} now holds another GaussianIndex table ({self.kind} {stored.get('table_id')}, this "
                f"index's is {self.table_id}): the database was replaced; load the index again"
            )
        if not self.changed(known_rows):
            return False
        self._ann = None
        return True

    def ann_tables(self) -> dict[str, AnnTable]:
        """The ANN tables of both directions ({} if they were never built), read once."""
        if self._ann is None:
            self._ann = self.read_ann()
        return self._ann

    def ann_covers(self, size: int) -> bool:
        """Whether ANN tables exist for an index of ``size`` rows: built, and the rows added since (scanned flat)
        no more than the rows they were built from."""
        tables = self.ann_tables()
        return bool(tables) and all(size - table.rows <= table.rows for table in tables.values())

    def build_ann_index(self, embeddings: GaussianEmbeddings) -> None:
        """(Re)build the ANN table of each direction from the stored Gaussians ``embeddings`` (all rows, id order)."""
        self._ann = {direction: self.write_ann(embeddings, direction) for direction in SEARCH_DIRECTIONS}

    def ensure_ann_index(self, embeddings: GaussianEmbeddings) -> None:
        """Build the ANN tables unless they cover the ``embeddings`` (all stored rows): under the write lock, after
        reading them again (another handle may have just built them)."""
        if self.ann_covers(len(embeddings.mu)):
            return
        with self.writing():
            self._ann = None
            if not self.ann_covers(len(embeddings.mu)):
                self.build_ann_index(embeddings)

    def ann_candidates(
        self, queries: GaussianEmbeddings, count: int, direction: str, size: int, options: dict[str, int]
    ) -> torch.Tensor:
        """``(Q, C)`` ids: the ANN table's ``count`` nearest lifted vectors, then the rows added since it was built
        (flat scan) and the items kept out of it (scored exactly by the caller)."""
        ann = self.ann_tables()[direction]
        vectors = lifted_queries(queries, direction, ann.transform, self.kl_weight)
        parts = [self.ann_search(ann, vectors, count, options)]
        if size > ann.rows:
            parts.append(self.candidates(queries, min(count, size - ann.rows), direction, first_id=ann.rows))
        if len(ann.transform["outliers"]):
            outliers = torch.from_numpy(ann.transform["outliers"])
            parts.append(outliers.expand(len(queries), len(outliers)))
        return torch.cat(parts, dim=1)


class CollectionStore(DatabaseStore):
    """A store in a named collection of a database that holds many (Qdrant, Milvus): ``uri`` = ``place#name``, the
    settings in the collection's metadata under ``SETTINGS_KEY``, the ANN collections ``<name>_ann_<direction>``
    with their transform under ``ANN_KEY``. An engine subclass adds the hooks below to those of [`DatabaseStore`]."""

    backend: ClassVar[str]  # the backend name that reopens it, for messages

    def __init__(self, uri: str, settings: dict[str, Any]):
        super().__init__(uri, settings)
        self.folder, self.name = split_uri(uri)
        self.client = self.connect(self.folder)

    # the engine's hooks

    @staticmethod
    def connect(place: str) -> Any:
        """The engine's client of ``place``, one per process."""
        raise NotImplementedError

    @staticmethod
    def exists(client: Any, name: str) -> bool:
        """Whether the collection ``name`` exists."""
        raise NotImplementedError

    @staticmethod
    def metadata(client: Any, name: str) -> dict[str, Any]:
        """The GaussianIndex entries (``SETTINGS_KEY``, ``ANN_KEY``) of the collection ``name``'s metadata."""
        raise NotImplementedError

    @classmethod
    def is_database(cls, path: Path) -> bool:
        """Whether the local ``path`` holds a database of the engine (looked at without opening it)."""
        raise NotImplementedError

    def check_schema(self) -> None:
        """``ValueError`` unless the collection's vectors have the sizes its settings need."""
        raise NotImplementedError

    # shared

    @classmethod
    def check_uri(cls, place: str, name: str) -> None:
        """``ValueError`` unless the engine takes ``place`` and the collection name ``name``."""

    @classmethod
    def local_path(cls, uri: str | Path) -> Path | None:
        place = split_uri(uri)[0]
        return None if is_server(place) or place == MEMORY else Path(place)

    @classmethod
    def normalized(cls, uri: str | Path) -> str:
        place, name = split_uri(uri)
        cls.check_uri(place, name)
        local = cls.local_path(place)
        place = str(local.resolve()) if local is not None else place
        return place if name == DEFAULT_COLLECTION else f"{place}#{name}"

    @classmethod
    def open(cls, uri: str | Path) -> tuple[CollectionStore, dict[str, Any]]:
        uri = cls.normalized(uri)
        place, name = split_uri(uri)
        local = cls.local_path(uri)
        if local is not None and not cls.is_database(local):  # connecting would create one
            raise FileNotFoundError(f"{place} does not exist or holds no database: no GaussianIndex there")
        client = cls.connect(place)
        if not cls.exists(client, name):
            raise FileNotFoundError(f"{place} holds no GaussianIndex collection ({name!r})")
        settings = cls.metadata(client, name).get(SETTINGS_KEY)
        if not isinstance(settings, dict):
            raise ValueError(f"{uri}: {cls.kind} {name!r} has no GaussianIndex settings in its metadata")
        store = cls(uri, settings)
        store.check_schema()
        return store, settings

    @classmethod
    def holds(cls, uri: str | Path) -> bool:
        local = cls.local_path(uri)
        if local is None or not cls.is_database(local):
            return False
        return cls.exists(cls.connect(str(local.resolve())), split_uri(uri)[1])

    @classmethod
    def check_new(cls, uri: str | Path) -> None:
        place, name = split_uri(uri)
        local = cls.local_path(uri)
        if local is not None and not local.exists():
            return
        if cls.exists(cls.connect(place), name):
            raise FileExistsError(
                f"{uri} already holds a collection {name!r}: reopen a GaussianIndex there with "
                f"BACKENDS[{cls.backend!r}].open({str(uri)!r}), remove it or pass another uri or #collection"
            )

    def writing(self) -> FileLock:
        """A machine-wide lock (the local modes keep their database to one process)."""
        return write_lock(self.folder, None)

    def stored_settings(self) -> dict[str, Any]:
        try:
            metadata = self.metadata(self.client, self.name)
        except Exception as error:  # the client's own errors (a deleted collection, a server gone)
            raise ValueError(
                f"{self.uri}: the {self.kind} {self.name!r} cannot be read any more ({first_line(error)})"
            ) from None
        return metadata.get(SETTINGS_KEY) or {}

    def ann_name(self, direction: str) -> str:
        """The ANN collection of ``direction``."""
        return f"{self.name}_ann_{direction}"

    def read_ann(self) -> dict[str, AnnTable]:
        names = {direction: self.ann_name(direction) for direction in SEARCH_DIRECTIONS}
        if not all(self.exists(self.client, name) for name in names.values()):
            return {}
        return {
            direction: AnnTable(
                name,
                *transform_from_metadata(
                    self.metadata(self.client, name)[ANN_KEY], direction, self.dim, self.kl_weight
                ),
            )
            for direction, name in names.items()
        }


class DatabaseBackend(SearchBackend):
    """A backend whose Gaussians, sentences and maps live in a database at the ``uri`` option (a new table, created;
    one that already holds an index is refused), the shortlist from the store's flat raw inner-product scan. The
    database is the index's store: every ``add`` is written to it at once under its write lock, and rows other
    handles wrote are read before each search (``sync``)."""

    database = True
    store_class: ClassVar[type[DatabaseStore]]

    def __init__(self, index: GaussianIndex, options: dict[str, Any]) -> None:
        super().__init__(index, options)
        self.uri = self.store_class.normalized(options["uri"])
        self.nprobes = options["nprobes"]
        table = options.get("table")
        if table is None:  # the size and place are the database's own
            settings = {**index.base_settings(), "nprobes": self.nprobes, "table_id": uuid.uuid4().hex}
            table = self.store_class.create(self.uri, settings)
        self.table = table

    def settings(self) -> dict[str, Any]:
        return {"uri": self.uri, "nprobes": self.nprobes, "table_id": self.table.table_id}

    def add(self, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None) -> None:
        with self.table.writing():  # ids after the table's last row, whoever wrote it
            self.sync()
            self.table.append(embeddings, len(self.index), sentences)
            self.index.store(embeddings)

    def sync(self) -> None:
        if self.table.refresh(len(self.index)):
            stored, _ = self.table.read(first_id=len(self.index))
            if len(stored):
                self.index.store(self.index.checked(stored, f"{self.uri} {self.store_class.kind}"))

    def exact_scan(self, count: int) -> bool:
        """Whether a shortlist of ``count`` is every stored item, or more than the engine returns: the index then
        scores every item itself."""
        limit = self.store_class.max_shortlist
        return count >= len(self.index) or (limit is not None and count > limit)

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor | None:
        if self.exact_scan(count):
            return None
        return self.table.candidates(queries, count, direction)

    def check_saved(self, settings: dict[str, Any], settings_file: Path) -> None:
        """``ValueError`` unless the saved index ``settings`` name this database's table (its ``table_id``) and rank
        as it does (dimension, reduction, ``kl_weight``)."""
        if settings.get("table_id") != self.table.table_id:
            raise ValueError(
                f"{settings_file} was built on the {self.store_class.kind} {settings.get('table_id')} at {self.uri}, "
                f"which now holds another one ({self.table.table_id}): the database was replaced; build this index "
                "again"
            )
        ours = self.index.base_settings()
        for key in ("dim", "reduction", "kl_weight"):
            if settings.get(key) != ours.get(key):
                raise ValueError(
                    f"{settings_file} says {key}={settings.get(key)!r}, the {self.store_class.kind} at {self.uri} "
                    f"{key}={ours.get(key)!r}: the two do not belong together"
                )

    def search_options(self) -> dict[str, int]:
        """What an approximate search of the engine may read: the index's ``nprobes`` and ``ef_search``."""
        return {"nprobes": self.nprobes, "ef_search": self.index.ef_search}

    @classmethod
    def holds_index(cls, uri: str | Path) -> bool:
        return cls.store_class.holds(uri)

    @classmethod
    def check_new_place(cls, uri: str | Path) -> None:
        cls.store_class.check_new(cls.store_class.normalized(uri))

    @classmethod
    def open(cls, uri: str | Path) -> GaussianIndex:
        """The index stored in the database at ``uri`` (settings from its table's metadata; the Gaussians read back
        for the exact re-score); its ``add`` goes on writing to that database."""
        from gausscse.search.index import GaussianIndex

        uri = cls.store_class.normalized(uri)
        table, settings = cls.store_class.open(uri)
        try:
            index = GaussianIndex(
                int(settings["dim"]),
                settings["reduction"],
                settings["backend"],
                candidates_per_result=int(settings["candidates_per_result"]),
                ef_search=int(settings.get("ef_search", 128)),
                uri=uri,
                nprobes=int(settings["nprobes"]),
                kl_weight=settings.get("kl_weight"),
                _table=table,
            )
        except KeyError as error:
            raise ValueError(f"{uri}: the stored GaussianIndex settings have no {error.args[0]!r}") from None
        stored, _ = table.read()
        index.store(index.checked(stored, f"{uri} {cls.store_class.kind}"))
        return index


class ApproximateSearch(DatabaseBackend):
    """A database backend searched through the engine's own ANN index on the lifted maps, in one more table per
    direction (module docstring), built at the first search and rebuilt when later rows outnumber the indexed ones."""

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor | None:
        if self.exact_scan(count):
            return None
        self.table.ensure_ann_index(self.index.embeddings)
        return self.table.ann_candidates(queries, count, direction, len(self.index), self.search_options())


__all__ = [
    "DEFAULT_COLLECTION",
    "AnnTable",
    "ApproximateSearch",
    "CollectionStore",
    "DatabaseBackend",
    "DatabaseStore",
    "split_uri",
    "write_lock",
]
