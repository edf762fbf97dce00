"""What the database backends (LanceDB, Qdrant, Milvus) share. One index is one table or collection at the ``uri``
option: a row holds an item's id, μ, log σ², sentence (or null) and its raw ``stored_map`` vectors; the settings and a
``table_id`` drawn at creation live in the table's metadata; the ANN tables (one per direction) hold lifted vectors."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from gausscse.io import first_line, machine_lock
from gausscse.model.gaussian import SEARCH_DIRECTIONS, GaussianEmbeddings, search_map_width, stored_map
from gausscse.search.backends.base import SearchBackend
from gausscse.search.lift import fit_lift, kept_columns, query_vectors

if TYPE_CHECKING:
    from gausscse.search.index import GaussianIndex

DEFAULT_COLLECTION = "gaussians"
MEMORY = ":memory:"  # Qdrant's in-memory store
SETTINGS_KEY = "gausscse"  # the table metadata entry of the index settings
ANN_KEY = "gausscse_ann"  # that of an ANN table: its lift transform, and how many rows it was built from
MAP_FIELDS = {"entailing": "entailing_vector", "entailed_by": "entailed_by_vector"}  # the stored maps' columns
QUERIES_PER_REQUEST = 256
WRITER_SUFFIX = "_writer"  # the collection that exists while a writer holds an index's lock: <index>_writer


def split_uri(uri: str | Path) -> tuple[str, str]:
    """``(place, collection)`` of a Qdrant or Milvus ``uri`` (``place#name``; default ``DEFAULT_COLLECTION``)."""
    place, _, name = str(uri).partition("#")
    return place, name or DEFAULT_COLLECTION


def is_server(place: str) -> bool:
    """Whether ``place`` is a server URL (``http://``, ``tcp://``, ...)."""
    return "://" in place


def check_unused(folder: Path, needs: str) -> None:
    """``FileExistsError`` if ``folder`` is a file or a folder with anything in it (``needs``: what a new one is)."""
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        held = f"holds {', '.join(sorted(p.name for p in folder.iterdir())[:4])}" if folder.is_dir() else "is a file"
        raise FileExistsError(f"{folder} {held}: {needs}")


def process_gone(holder: dict[str, Any]) -> bool:
    """Whether the lock ``holder`` (``host``, ``pid``) is a process of this machine that has ended."""
    if holder.get("host") != socket.gethostname():
        return False  # another machine's: only it can tell
    try:
        os.kill(int(holder["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, KeyError, TypeError, ValueError):
        return False
    return False


def in_id_order(ids: np.ndarray, first_id: int, where: str) -> np.ndarray:
    """The order that sorts ``ids`` read from ``where``; ``ValueError`` unless they are ``first_id, ...``, no gap."""
    order = np.argsort(ids, kind="stable")
    if not np.array_equal(ids[order], np.arange(first_id, first_id + len(ids))):
        raise ValueError(f"{where}: the ids are not {first_id}..{first_id + len(ids) - 1}")
    return order


@dataclass
class AnnTable:
    """One direction's ANN table: the engine's handle, its vectors' lift transform, the stored rows it covers."""

    table: Any
    transform: dict[str, np.ndarray]
    rows: int


class DatabaseStore:
    """One index's rows in a database at ``uri``: rows in, shortlists out. Writers hold ``writing()`` and number their
    rows after the table's last one; [`refresh`] shows each handle what others wrote, or that ``table_id`` changed.

    An engine implements the classmethods ``create(uri, settings)`` (a new, empty table, never an overwrite),
    ``open(uri)`` (``(store, settings)``; ``FileNotFoundError``: no table, ``ValueError``: not an index's),
    ``holds(uri)`` (whether a local database holds an index), ``check_new(uri)`` (``FileExistsError`` where one is); and
    ``writing()`` (the writers' lock), ``stored_settings()`` (``ValueError`` once they cannot be read),
    ``changed(known_rows, stored)`` (whether other handles wrote; ``stored``: the settings just read), ``insert(ids,
    columns, table=None)`` (into the index's table or an ANN one), ``replace(ids, columns)`` (the rows ``ids`` written
    over any of those ids, in one request or transaction; engines other processes share: ``shared``),
    ``read(first_id=0)`` (Gaussians and sentences in id order), ``search(vectors, count, direction, first_id=0,
    ann=None, options=None)`` (per query the ids of largest raw ⟨query map, stored map⟩ from ``first_id`` on, or nearest
    through the ANN index of ``ann``), ``find_ann(direction)``
    (``(handle, metadata)`` or ``None``) and ``new_ann_table(direction, ids, vectors, metadata)`` (its handle)."""

    kind: ClassVar[str]  # what the engine calls it, for messages: "LanceDB table", "Qdrant collection", ...
    default_suffix: ClassVar[str]  # the default uri of the command line: INDEX + this suffix
    place: ClassVar[str]  # what the uri is, for messages
    max_shortlist: ClassVar[int | None] = None  # the most hits the engine returns per query
    max_ef_search: ClassVar[int | None] = None  # the widest HNSW search the engine allows
    max_sentence_bytes: ClassVar[int | None] = None  # the longest sentence the engine keeps
    map_fields: ClassVar[dict[str, str]] = MAP_FIELDS  # the stored map of each direction: its column
    local_shared: ClassVar[bool] = False  # whether other processes may write into a local database while it is open

    @classmethod
    def shared(cls, uri: str | Path) -> bool:
        """Whether processes other than this one (Ray workers) can write into the database at ``uri`` at once: a
        server, or a local database its engine serves to many processes."""
        return cls.local_path(uri) is None or cls.local_shared

    def __init__(self, uri: str, settings: dict[str, Any]):
        self.uri = uri
        try:
            self.dim = int(settings["dim"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{uri}: the GaussianIndex settings of the {self.kind} have no valid 'dim'") from None
        self.kl_weight, self.table_id = settings.get("kl_weight"), settings.get("table_id")
        self._ann: dict[str, AnnTable] | None = None  # read at the first ANN search, then kept

    @classmethod
    def normalized(cls, uri: str | Path) -> str:
        """``uri`` as the index records it (a local path made absolute)."""
        return str(Path(uri).resolve())

    @classmethod
    def shareable(cls, uri: str) -> str:
        """``uri`` as files and messages may show it: without a password (an engine whose uris carry one removes it)."""
        return uri

    @classmethod
    def local_path(cls, uri: str | Path) -> Path | None:
        """The local folder or file of the database at ``uri`` (``None``: a server, an in-memory store)."""
        return Path(uri)

    def sizes(self) -> dict[str, int]:
        """The vector sizes the settings need: ``search_map_width`` for the stored maps, d for ``mu`` and ``logvar``."""
        width = search_map_width(self.dim, self.kl_weight)
        return {**dict.fromkeys(self.map_fields.values(), width), "mu": self.dim, "logvar": self.dim}

    def refresh(self, known_rows: int) -> bool:
        """Whether another handle wrote since this one last read (the ANN tables are then read again); ``ValueError``
        if the database now holds another table than the one this handle opened."""
        stored = self.stored_settings()
        if stored.get("table_id") != self.table_id:
            replaced = f"{self.kind} {stored.get('table_id')}, this index's is {self.table_id}"
            raise ValueError(f"{self.uri} now holds another GaussianIndex table ({replaced}): load the index again")
        if not self.changed(known_rows, stored):
            return False
        self._ann = None
        return True

    def append(self, embeddings: GaussianEmbeddings, first_id: int, sentences: Sequence[str] | None) -> None:
        """Rows ``first_id, ...`` (under the lock, every earlier row read): μ, log σ², sentence, the stored maps;
        ``ValueError`` unless ``sentences`` is ``None`` or one string per Gaussian that the engine keeps."""
        columns = self.columns(embeddings, sentences)
        self.discard_from(first_id)  # rows of an add that never finished
        self.insert(np.arange(first_id, first_id + len(embeddings)), columns)
        self.commit(first_id + len(embeddings))  # written last: until then, readers see the rows before

    def put(self, ids: np.ndarray, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None) -> None:
        """Rows ``ids`` written over whatever the table holds at those ids, without the lock or a commit: a batch a
        Ray worker writes by its input positions, so that a batch written again (Ray retrying it) leaves the same
        rows, never a second copy; the writer that reserved the ids (``DatabaseBackend.reserved``) makes them
        visible."""
        self.replace(ids, self.columns(embeddings, sentences))

    def columns(self, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None) -> dict[str, Any]:
        """The columns of rows holding ``embeddings`` and ``sentences``: μ, log σ², sentence, the stored maps;
        ``ValueError`` unless ``sentences`` is ``None`` or one string per Gaussian that the engine keeps."""
        mu, logvar, limit = embeddings.mu.cpu(), embeddings.logvar.cpu(), self.max_sentence_bytes
        if sentences is not None and (isinstance(sentences, str) or len(sentences) != len(mu)):
            raise ValueError(f"sentences must be a list of {len(mu)} strings, one per Gaussian")
        for row, text in enumerate([] if sentences is None else sentences):
            if not isinstance(text, str):
                raise ValueError(f"sentences[{row}] must be a string, got {type(text).__name__}")
            if limit and len(text.encode()) > limit:
                raise ValueError(f"sentences[{row}] is longer than {self.kind.split()[0]} keeps ({limit} bytes)")
        sentences = [None] * len(mu) if sentences is None else list(sentences)
        columns = {"mu": mu.numpy(), "logvar": logvar.numpy(), "sentence": sentences}
        for direction, field in self.map_fields.items():
            columns[field] = stored_map(mu, logvar, direction, self.kl_weight).float().numpy()
        return columns

    def reserving(self) -> contextlib.AbstractContextManager[None]:
        """The writers' lock while other processes write rows that this one counts and commits
        (``DatabaseBackend.reserved``): ``writing()``, which an engine whose ``writing`` is one transaction replaces by
        a lock outside any."""
        return self.writing()

    def discard_from(self, first_id: int) -> None:
        """Remove the rows of id ``first_id`` on (an engine's hook: where an add is several requests)."""

    def fetch(self, ids: np.ndarray) -> tuple[GaussianEmbeddings, list[str | None]]:
        """The Gaussians and sentences of the distinct rows ``ids``, in that order (the engine's ``read_ids``: a
        request per batch, never the whole table); ``ValueError`` naming a row the table does not hold."""
        found = {int(row["id"]): row for row in self.read_ids(ids)}
        missing = next((int(row) for row in ids if int(row) not in found), None)
        if missing is not None:
            raise ValueError(f"{self.uri}: the {self.kind} has no row {missing}: it was changed outside this index")
        rows = [found[int(row)] for row in ids]

        def matrix(name: str) -> torch.Tensor:
            return torch.tensor(np.array([row[name] for row in rows], dtype=np.float32).reshape(-1, self.dim))

        return GaussianEmbeddings(matrix("mu"), matrix("logvar")), [row["sentence"] for row in rows]

    def commit(self, rows: int) -> None:
        """Record ``rows`` as the table's complete row count (an engine's hook: where an add is several requests)."""

    def hits(self, vectors: np.ndarray, count: int, direction: str, **request: Any) -> torch.Tensor:
        """``(Q, count)`` ids [`search`] finds, ``QUERIES_PER_REQUEST`` rows of ``vectors`` at a time; −1: none. An
        engine's ``search(vectors, count, direction, first_id=0, ann=None, options=None, end_id=None)`` scans the rows
        ``first_id <= id < end_id`` (``end_id``: the index's complete rows, so the rows of an add under way or of a
        writer that died never fill a shortlist), or searches the ANN table ``ann``."""
        ids = torch.full((len(vectors), count), -1, dtype=torch.long)
        for start in range(0, len(vectors), QUERIES_PER_REQUEST):
            chunk = vectors[start : start + QUERIES_PER_REQUEST]
            for row, found in enumerate(self.search(chunk, count, direction, **request), start=start):
                found = np.asarray(found, dtype=np.int64)[:count]
                ids[row, : len(found)] = torch.from_numpy(found)
        return ids

    def ann_tables(self) -> dict[str, AnnTable]:
        """The [`AnnTable`] of each direction ({} unless both were built), read once."""
        if self._ann is None:
            found = {direction: self.find_ann(direction) for direction in SEARCH_DIRECTIONS}
            tables = {}
            for direction, (table, metadata) in (found if None not in found.values() else {}).items():
                if not self.ann_complete(table, metadata):  # another index's, or a build cut short: built again
                    tables = {}
                    break
                transform = {key: np.array(metadata[key], dtype=np.float64) for key in ("mean", "scale")}
                transform["keep"] = kept_columns(direction, self.dim, self.kl_weight)
                transform["radius2"] = np.array([metadata["radius2"]])
                transform["outliers"] = np.array(metadata["outliers"], dtype=np.int64)
                tables[direction] = AnnTable(table, transform, int(metadata["rows"]))
            self._ann = tables
        return self._ann

    def ann_complete(self, table: Any, metadata: dict[str, Any]) -> bool:
        """Whether the ANN table ``table`` was built for this index (its parent's ``table_id``) and holds every vector
        its metadata counts (a build is cut short between requests), where the engine can count them."""
        rows = self.row_count(table)
        return metadata.get("table_id") == self.table_id and (rows is None or rows == metadata.get("vectors"))

    def row_count(self, table: Any) -> int | None:
        """How many rows the collection ``table`` holds (an engine's hook; ``None``: not counted)."""
        return None

    def holds_unfinished(self, rows: int) -> bool:
        """Whether the table holds more than the ``rows`` of complete adds (an add under way, or one whose writer
        died): only then does a flat scan take the bound ``id < rows``, which some engines filter slowly (Qdrant's
        embedded mode tests every point in Python). Never, where an add is one commit (LanceDB's)."""
        return False

    def ann_covers(self, size: int) -> bool:
        """Whether the ANN tables serve an index of ``size`` rows: built, and later rows no more than their own."""
        tables = self.ann_tables()
        return bool(tables) and all(size - table.rows <= table.rows for table in tables.values())

    def ann_candidates(
        self,
        queries: GaussianEmbeddings,
        count: int,
        direction: str,
        size: int,
        stored: Callable[[], GaussianEmbeddings],
        **options: Any,
    ) -> torch.Tensor:
        """``(Q, C)`` ids: the ANN table's ``count`` nearest of the index's ``size`` rows, then the rows added since it
        was built (flat scan) and the items kept out of it. The ANN tables are first (re)built from the ``stored()``
        Gaussians (read for the build, not kept) unless they cover them: under the write lock, after reading them
        again (another handle may have just built them)."""
        if not self.ann_covers(size):
            with self.writing():
                self._ann = None
                if not self.ann_covers(size):
                    stored = stored()
                    tables = {}
                    for table_direction in SEARCH_DIRECTIONS:  # metadata: the lift transform, the rows (JSON values)
                        transform, inliers, vectors = fit_lift(stored, table_direction, self.kl_weight)
                        metadata = {key: transform[key].tolist() for key in ("mean", "scale", "outliers")}
                        metadata.update(radius2=float(transform["radius2"][0]), rows=size)
                        metadata.update(table_id=self.table_id, vectors=len(inliers))
                        table = self.new_ann_table(table_direction, inliers, vectors, metadata)
                        tables[table_direction] = AnnTable(table, transform, size)
                    self._ann = tables
        ann = self.ann_tables()[direction]
        vectors = query_vectors(queries, direction, self.kl_weight, ann.transform)
        parts = [self.hits(vectors, count, direction, ann=ann, options=options)]
        if size > ann.rows:
            vectors = query_vectors(queries, direction, self.kl_weight)
            parts.append(self.hits(vectors, min(count, size - ann.rows), direction, first_id=ann.rows, end_id=size))
        if len(ann.transform["outliers"]):
            outliers = torch.from_numpy(ann.transform["outliers"])
            parts.append(outliers.expand(len(queries), len(outliers)))
        return torch.cat(parts, dim=1)


def id_range(first_id: int, end_id: int | None) -> str:
    """The filter of the rows ``first_id <= id < end_id`` in the engines' SQL-like syntax (``""``: every row)."""
    bounds = ([f"id >= {first_id}"] if first_id else []) + ([f"id < {end_id}"] if end_id is not None else [])
    return " and ".join(bounds)


class CollectionStore(DatabaseStore):
    """A store in a named collection (``uri`` = ``place#name``) of a Qdrant, Milvus or PostgreSQL database, its ANN
    collections ``<name>_ann_<direction>``. An engine adds ``connect(place)`` (its client), ``exists(client, name)``,
    ``metadata(client, name)`` (the ``SETTINGS_KEY``, ``ANN_KEY`` entries), ``is_database(path)`` (seen unopened),
    ``new_collection(settings)``, ``new_ann_collection(name, width, metadata)``, ``drop(name)``, ``vector_sizes()``,
    ``read_page(first_id, cursor)`` (``(rows, next cursor or None)``, each row a dict: id, mu, logvar, sentence),
    ``row_count(name)``, ``write_settings(settings)`` (the collection's ``SETTINGS_KEY`` metadata), ``read_ids(ids)``
    and ``delete_from(first_id)`` (unless its adds are transactions: ``discard_from`` then does nothing), and for the
    writers' lock ``new_lock(name, holder)`` (a collection recording the JSON text ``holder``; the engine refuses it
    where one of that name exists) and ``lock_holder(name)`` (that text, ``None``: no such collection). An add is
    visible once complete: its row count is written into the settings last."""

    backend_name: ClassVar[str]  # the exact backend's name (``backend=``): "qdrant", "milvus", "pgvector"
    lock_collection: ClassVar[bool] = True  # writers lock through a collection (else the engine's own ``writing``)
    lock_timeout: ClassVar[float] = 600.0  # how long a writer waits for another machine's writer, in seconds

    def __init__(self, uri: str, settings: dict[str, Any], client: Any = None):
        """``client``: one already connected to the place (``open``'s), else a new one."""
        super().__init__(uri, settings)
        self.folder, self.name = split_uri(uri)
        self.client = self.client_of(self.folder) if client is None else client

    @classmethod
    def client_of(cls, place: str) -> Any:
        """``connect(place)``, its errors (a place another process holds, no server) as a ``ValueError``."""
        try:
            return cls.connect(place)
        except Exception as error:
            raise ValueError(f"{place}: {cls.kind.split()[0]} cannot open it ({first_line(error)})") from None

    @classmethod
    def check_uri(cls, place: str, name: str) -> None:
        """``ValueError`` unless the engine takes ``place`` and the collection name ``name``."""

    @staticmethod
    def opened(client, name: str) -> None:
        """Make the existing collection ``name`` ready to be searched (an engine's hook; nothing by default)."""

    @classmethod
    def check_name(cls, uri: str, name: str) -> None:
        """``ValueError`` for a collection named as an index's ANN collections are (``<index>_ann_<direction>``) or its
        writers' lock (``<index>_writer``)."""
        if cls.lock_collection and name.endswith(WRITER_SUFFIX):
            parent = name.removesuffix(WRITER_SUFFIX)
            lock = f"{name!r} is the name of the writers' lock of an index named {parent!r}"
            raise ValueError(f"{uri}: {lock}: choose another")
        for direction in SEARCH_DIRECTIONS:
            if name.endswith(f"_ann_{direction}"):
                parent = name.removesuffix(f"_ann_{direction}")
                raise ValueError(
                    f"{uri}: {name!r} is the name of the ANN collection of an index named {parent!r}: choose another"
                )

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
    def create(cls, uri: str, settings: dict[str, Any]) -> CollectionStore:
        cls.check_name(uri, split_uri(uri)[1])
        cls.check_new(uri)
        store = cls(uri, settings)
        store.new_collection(settings)
        return store

    @classmethod
    def open(cls, uri: str | Path) -> tuple[CollectionStore, dict[str, Any]]:
        uri = cls.normalized(uri)
        place, name = split_uri(uri)
        local = cls.local_path(uri)
        if local is not None and not cls.is_database(local):  # connecting would create one
            raise FileNotFoundError(f"{place} does not exist or holds no database: no GaussianIndex there")
        client = cls.client_of(place)
        if not cls.exists(client, name):
            raise FileNotFoundError(f"{place} holds no GaussianIndex collection ({name!r})")
        cls.opened(client, name)
        settings = cls.metadata(client, name).get(SETTINGS_KEY)
        if not isinstance(settings, dict):
            raise ValueError(f"{uri}: {cls.kind} {name!r} has no GaussianIndex settings in its metadata")
        store = cls(uri, settings, client)
        found, expected = store.vector_sizes(), store.sizes()
        if found != expected:
            needed = f"its settings (d = {store.dim}, kl_weight = {store.kl_weight}) need {expected}"
            raise ValueError(f"{uri}: {cls.kind} {name!r} has the vector sizes {found}; {needed}")
        return store, settings

    @classmethod
    def holds(cls, uri: str | Path) -> bool:
        local = cls.local_path(uri)
        if local is None or not cls.is_database(local):
            return False
        return cls.exists(cls.client_of(str(local.resolve())), split_uri(uri)[1])

    new_place: ClassVar[str]  # what a local place needs to be to hold a new collection (refused otherwise)

    @classmethod
    def check_new(cls, uri: str | Path) -> None:
        """``FileExistsError`` for a local place that holds something else than this engine's database, or a
        collection of that name."""
        place, name = split_uri(uri)
        local = cls.local_path(uri)
        if local is not None and not cls.is_database(local):
            check_unused(local, cls.new_place)
        if (local is None or local.exists()) and cls.exists(cls.client_of(place), name):
            reopen = f"GaussianIndex.open({cls.backend_name!r}, {cls.shareable(str(uri))!r})"
            message = f"reopen a GaussianIndex there with {reopen}, remove it or pass another uri or #collection"
            raise FileExistsError(f"{cls.shareable(str(uri))} already holds a collection {name!r}: {message}")

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """The writers' lock, held by the engine: the collection ``<name>_writer``, which exists while a writer holds
        it and records that writer (host, process, a token). The engine refuses a second collection of that name,
        whichever machine asks, and the token read back tells the winner. A holder of this machine whose process has
        ended is cleared; another machine's is waited for ``lock_timeout`` seconds, then named in a ``TimeoutError``."""
        name = f"{self.name}{WRITER_SUFFIX}"
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex}
        deadline, delay = time.monotonic() + self.lock_timeout, 0.01
        while True:
            refused = None
            try:
                self.new_lock(name, json.dumps(holder, sort_keys=True))
            except Exception as error:  # the engine's refusal: that collection exists, or did a moment ago
                refused = error
            found = self.read_holder(name)
            if found == holder:
                break
            if found is not None and process_gone(found):
                self.clear_lock(name, found)
            elif time.monotonic() > deadline:
                held = f"{found.get('host')}, process {found.get('pid')}" if found else "a writer"
                message = f"the {self.kind} {name!r} says {held} is writing: wait, or drop it if that writer is gone"
                engine = f" (the engine said: {first_line(refused)})" if refused is not None and found is None else ""
                raise TimeoutError(f"{self.uri}: {message}{engine}")
            time.sleep(delay)
            delay = min(2 * delay, 0.5)
        try:
            yield
        finally:
            if self.read_holder(name) == holder:
                self.drop(name)

    def read_holder(self, name: str) -> dict[str, Any] | None:
        """The writer the lock ``name`` records (``None``: not held; ``{}``: a collection that names no writer)."""
        try:
            text = self.lock_holder(name)
        except Exception:  # dropped between the engine's requests
            return None if not self.exists(self.client, name) else {}
        if text is None:
            return None
        with contextlib.suppress(TypeError, ValueError):
            found = json.loads(text)
            return found if isinstance(found, dict) else {}
        return {}

    def clear_lock(self, name: str, holder: dict[str, Any]) -> None:
        """Drop the lock ``name`` of the ended process ``holder``: one writer of this machine at a time, and only if
        it still records that holder (another writer may have cleared it and taken the lock since)."""
        with machine_lock(f"{self.folder}#{name}"):
            if self.read_holder(name) == holder:
                self.drop(name)

    def stored_settings(self) -> dict[str, Any]:
        try:
            metadata = self.metadata(self.client, self.name)
        except Exception as error:  # the client's own errors (a deleted collection, a server gone)
            message = f"the {self.kind} {self.name!r} cannot be read any more ({first_line(error)})"
            raise ValueError(f"{self.uri}: {message}") from None
        return metadata.get(SETTINGS_KEY) or {}

    def committed_rows(self, stored: dict[str, Any] | None = None) -> int:
        """The complete rows: the count the last finished add recorded in the settings (``stored``: as just read; a
        collection written before counts kept theirs: all rows)."""
        rows = (self.stored_settings() if stored is None else stored).get("rows")
        if rows is None:
            return self.row_count(self.name)
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < 0:
            where = f"the GaussianIndex settings of the {self.kind} {self.name!r}"
            raise ValueError(f"{self.uri}: {where} say rows={rows!r}, not a row count: the index is damaged")
        return rows

    def changed(self, known_rows: int, stored: dict[str, Any]) -> bool:
        return self.committed_rows(stored) != known_rows

    def row_total(self) -> int:
        return self.committed_rows()

    def commit(self, rows: int) -> None:
        self.write_settings({**self.stored_settings(), "rows": rows})

    def discard_from(self, first_id: int) -> None:
        if self.row_count(self.name) > first_id:
            self.delete_from(first_id)

    def holds_unfinished(self, rows: int) -> bool:
        return self.row_count(self.name) > rows  # an add goes in several requests

    def read(self, first_id: int = 0) -> tuple[GaussianEmbeddings, list[str | None]]:
        complete = self.committed_rows()
        rows, cursor = self.read_page(first_id, None)
        while cursor is not None:
            page, cursor = self.read_page(first_id, cursor)
            rows += page
        rows = [row for row in rows if row["id"] < complete]  # not those of an add that never finished
        ids = np.array([row["id"] for row in rows], dtype=np.int64)
        order = in_id_order(ids, first_id, f"{self.uri} collection {self.name!r}")

        def matrix(name: str) -> torch.Tensor:
            return torch.tensor(np.array([rows[row][name] for row in order], dtype=np.float32).reshape(-1, self.dim))

        return GaussianEmbeddings(matrix("mu"), matrix("logvar")), [rows[row]["sentence"] for row in order]

    def ann_metadata(self, name: str) -> dict[str, Any] | None:
        """The ``ANN_KEY`` metadata of the collection ``name`` (``None``: there is none); ``ValueError`` where that
        name holds a collection that is no ANN collection (another index)."""
        if not self.exists(self.client, name):
            return None
        metadata = self.metadata(self.client, name)
        if ANN_KEY not in metadata:
            raise ValueError(
                f"{self.uri}: the {self.kind} {name!r}, where this index keeps its ANN index, is another collection: "
                "remove or rename it, or search this index with the exact backend"
            )
        return metadata[ANN_KEY]

    def find_ann(self, direction: str) -> tuple[str, dict[str, Any]] | None:
        name = f"{self.name}_ann_{direction}"
        metadata = self.ann_metadata(name)
        if metadata is None:
            return None
        self.opened(self.client, name)
        return name, metadata

    def new_ann_table(self, direction: str, ids: np.ndarray, vectors: np.ndarray, metadata: dict[str, Any]) -> str:
        name = f"{self.name}_ann_{direction}"
        if self.ann_metadata(name) is not None:
            self.drop(name)
        self.new_ann_collection(name, vectors.shape[1], {ANN_KEY: metadata})
        self.insert(ids, {"vector": vectors}, table=name)
        return name


class DatabaseBackend(SearchBackend):
    """A backend whose Gaussians, sentences and maps live in a new table at the ``uri`` option, written at every
    ``add`` under the write lock; rows other handles wrote are read before each search (``sync``)."""

    database = True
    approximate: ClassVar[bool] = False  # shortlists from the engine's ANN index on the lifted maps
    store_class: ClassVar[type[DatabaseStore]]

    def __init__(self, index: GaussianIndex, options: dict[str, Any]) -> None:
        super().__init__(index, options)
        self.uri = self.store_class.normalized(options["uri"])
        self.nprobes = options["nprobes"]
        self.table = options.get("table")
        self.rows = 0  # the table's complete rows when this handle last looked (its only per-index state)
        self.check_ef_search()
        if self.table is None:
            settings = {**index.base_settings(), "nprobes": self.nprobes, "table_id": uuid.uuid4().hex}
            self.table = self.store_class.create(self.uri, settings)

    def check_ef_search(self) -> None:
        """``ValueError`` for an approximate search wider than the engine's HNSW search allows."""
        widest = self.store_class.max_ef_search
        if self.approximate and widest is not None and self.index.ef_search > widest:
            raise ValueError(
                f"ef_search={self.index.ef_search}: the {self.store_class.kind}'s HNSW search is at most "
                f"{widest:,} wide; for more recall, search exactly (backend={self.name.removesuffix('-hnsw')!r})"
            )

    def settings(self) -> dict[str, Any]:
        """What the index folder records: the uri without secrets (``shareable``), ``nprobes``, the table's id."""
        return {"uri": self.store_class.shareable(self.uri), "nprobes": self.nprobes, "table_id": self.table.table_id}

    def add(self, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None) -> None:
        with self.table.writing():  # ids after the table's last row, whoever wrote it
            self.sync()
            self.table.append(embeddings, self.rows, sentences)
            self.rows += len(embeddings)

    @contextlib.contextmanager
    def reserved(self, count: int) -> Iterator[int]:
        """The ids ``first_id, ..., first_id + count - 1`` for rows that other processes write by position
        ([`put`]: Ray workers): yields ``first_id`` under the write lock (the rows there of an earlier such write that
        never finished removed); on exit the table's rows are counted, not the writers' reports, and they become
        visible once exactly those ``count`` rows are there (``RuntimeError`` otherwise, nothing made visible)."""
        if not self.store_class.shared(self.uri):
            kind = self.store_class.kind
            raise ValueError(f"{self.uri}: other processes cannot write into this {kind} at once (a server can)")
        with self.table.reserving():
            self.sync()
            first_id = self.rows
            self.table.delete_from(first_id)
            yield first_id
            found = self.table.row_count(self.table.name) - first_id
            if found != count:
                kind = self.store_class.kind
                raise RuntimeError(f"{self.uri}: the {kind} holds {found} new rows for {count} sentences written")
            self.table.commit(first_id + count)
            self.rows = first_id + count

    def put(self, ids: np.ndarray, embeddings: GaussianEmbeddings, sentences: Sequence[str] | None) -> None:
        """Write checked ``embeddings`` (with ``sentences``) as the rows ``ids`` reserved by [`reserved`] in another
        process, over any rows of those ids: writing a batch again changes nothing."""
        self.table.put(ids, self.index.checked(embeddings, "embeddings"), sentences)

    def sync(self) -> None:
        if self.table.refresh(self.rows):
            self.rows = self.table.row_total()

    def size(self) -> int:
        return self.rows

    def stored(self) -> GaussianEmbeddings:
        """Every complete row, read from the database (the rows another handle added since the last sync: not yet)."""
        stored, _ = self.table.read()
        return self.index.checked(stored[: self.rows], f"{self.uri} {self.store_class.kind}")

    def gaussians(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rows ``ids`` read from the database, each distinct row once."""
        distinct, where = torch.unique(ids.cpu(), return_inverse=True)
        found, _ = self.table.fetch(distinct.numpy())
        return found.mu[where], found.logvar[where]

    def sentences(self, ids: Sequence[int]) -> list[str | None]:
        """The sentences stored with the rows ``ids``, read from the database."""
        return self.table.fetch(np.asarray(ids, dtype=np.int64))[1] if len(ids) else []

    def candidates(self, queries: GaussianEmbeddings, count: int, direction: str) -> torch.Tensor | None:
        limit = self.store_class.max_shortlist
        if count >= len(self.index) or (limit is not None and count > limit):
            return None  # every item, or more than the engine returns: the index scores them all
        if not self.approximate:  # a flat scan (the queries' maps scaled to unit length)
            vectors = query_vectors(queries, direction, self.table.kl_weight)
            end_id = len(self.index) if self.table.holds_unfinished(len(self.index)) else None
            ids = self.table.hits(vectors, count, direction, end_id=end_id)
        else:
            self.check_ef_search()  # again: ef_search may have been set since (refused before any graph is built)
            options = {"nprobes": self.nprobes, "ef_search": self.index.ef_search}
            ids = self.table.ann_candidates(queries, count, direction, self.rows, self.stored, **options)
        return ids.masked_fill(ids >= len(self.index), -1)  # rows of an add still under way: not served yet

    @classmethod
    def reopen(cls, settings: dict[str, Any], settings_file: Path, index_class: type[GaussianIndex]) -> GaussianIndex:
        """The index of a saved ``settings`` file: the database it names reopened; ``ValueError`` unless that holds
        the table it was built on (``table_id``), ranking as the settings say, with as many Gaussians."""
        if "uri" not in settings:
            raise ValueError(f"{settings_file} has no 'uri': the index is damaged")
        try:
            index = cls.open(settings["uri"], index_class)
        except FileNotFoundError as error:
            gone = f"{settings_file} names the database {settings['uri']}, which is gone"
            raise FileNotFoundError(f"{gone} ({error})") from None
        kind, uri, table_id = cls.store_class.kind, index.engine.uri, index.engine.table.table_id
        if settings.get("table_id") != table_id:
            built = f"{settings_file} was built on the {kind} {settings.get('table_id')} at {uri}"
            raise ValueError(f"{built}, which now holds another one ({table_id}): build this index again")
        ours = {**index.base_settings(), "size": len(index)}
        for key in ("dim", "reduction", "kl_weight", "size"):
            if settings.get(key) != ours.get(key):
                theirs = f"the {kind} at {uri} {key}={ours.get(key)!r}"
                raise ValueError(f"{settings_file} says {key}={settings.get(key)!r}, {theirs}")
        return index

    @classmethod
    def open(cls, uri: str | Path, index_class: type[GaussianIndex], as_built: bool = False) -> GaussianIndex:
        """The index (an ``index_class``) in the database at ``uri`` (settings from its table, Gaussians read back),
        searched as this backend says (flat or approximate), or with ``as_built`` as the backend that built it;
        ``add`` goes on writing there."""
        uri = cls.store_class.normalized(uri)
        table, settings = cls.store_class.open(uri)
        settings = {"ef_search": 128, **settings, **({} if as_built else {"backend": cls.name})}
        index = index_class.from_settings(
            settings, f"{uri} ({cls.store_class.kind})", ("nprobes",), uri=uri, _table=table
        )
        index.engine.rows = table.row_total()  # the rows stay in the database: read per search, as the search needs
        return index
