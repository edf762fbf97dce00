"""The PostgreSQL + pgvector backends: ``"pgvector"`` (an exact sequential scan ordered by ``<#>``, the negative raw
inner product — never the cosine) and ``"pgvector-hnsw"`` (pgvector's HNSW index, ``vector_ip_ops``, on the lifted
maps, ``hnsw.ef_search`` = ``ef_search``, the shortlist re-scored exactly). ``uri``: a server's
``postgresql://user:password@host:port/database`` or a local folder holding a PostgreSQL database that
[pgserver](https://pypi.org/project/pgserver/) starts for this process; ``#name`` picks the table.

A row: ``id`` (the primary key), ``mu``, ``logvar``, ``entailing_vector``, ``entailed_by_vector`` (``vector``
columns) and ``sentence``. The settings (``table_id``, the complete row count) live in the table ``gausscse_indexes``
beside it. An add is one transaction under a transaction-scoped advisory lock of the server: writers on any number of
machines number their rows apart, and a writer that dies mid-add leaves nothing behind."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import urllib.parse
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gausscse.io import first_line
from gausscse.model.gaussian import SEARCH_DIRECTIONS
from gausscse.search.backends import database
from gausscse.search.backends.base import HNSW_EF_CONSTRUCTION, HNSW_NEIGHBOURS, engine_module
from gausscse.search.backends.database import CollectionStore, DatabaseBackend

PGVECTOR, PGVECTOR_HNSW = "pgvector", "pgvector-hnsw"
REGISTRY = "gausscse_indexes"  # the settings table: one row per index table and per ANN table
POSTGRES_NAME_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1: a longer identifier is cut
LONGEST_ANN_SUFFIX = max((f"_ann_{direction}" for direction in SEARCH_DIRECTIONS), key=len)  # CollectionStore's
MAX_TABLE_NAME = POSTGRES_NAME_BYTES - len(LONGEST_ANN_SUFFIX)
TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # unquoted PostgreSQL identifiers, as written
MAX_EF_SEARCH = 1000  # pgvector's largest hnsw.ef_search: an HNSW scan returns at most this many rows
ROWS_PER_READ = 4096
INSTALL = "'gausscse[pgvector]'"

logger = logging.getLogger(__name__)


def sql_module():
    return engine_module("psycopg.sql", INSTALL)


def log_notice(notice) -> None:
    """A server's NOTICE or WARNING to this module's logger: as a warning where the server gives advice (a hint, such
    as pgvector's "hnsw graph no longer fits into maintenance_work_mem … Increase maintenance_work_mem to speed up
    builds") or warns, else at debug level ("relation … already exists, skipping")."""
    text = " ".join(part for part in (notice.message_primary, notice.message_detail, notice.message_hint) if part)
    advice = notice.message_hint or notice.severity_nonlocalized == "WARNING"
    logger.log(logging.WARNING if advice else logging.DEBUG, "PostgreSQL %s: %s", notice.severity_nonlocalized, text)


@functools.cache
def local_server(folder: str):
    """The pgserver PostgreSQL server of the database folder ``folder`` (created if new), stopped at exit."""
    pgserver = engine_module("pgserver", INSTALL)
    return pgserver.get_server(folder, cleanup_mode="stop")


def as_row(row: tuple) -> dict[str, Any]:
    """A read row ``(id, mu, logvar, sentence)`` as the stores' dict, the ``vector`` values as float32 arrays."""
    return {"id": row[0], "mu": row[1].to_numpy(), "logvar": row[2].to_numpy(), "sentence": row[3]}


class PgStore(CollectionStore):
    """One index's table in a PostgreSQL database with pgvector (module docstring)."""

    kind = "PostgreSQL table"

    backend_name = PGVECTOR
    default_suffix = ".pgdata"
    place = "a postgresql:// server URL or a local PostgreSQL database folder, with an optional #table"
    max_shortlist = MAX_EF_SEARCH
    max_ef_search = MAX_EF_SEARCH
    lock_collection = False  # writers lock through the server's advisory lock (``writing``)
    local_shared = True  # a local folder is still a PostgreSQL server: any process on the machine writes into it
    new_place = "a local PostgreSQL database needs a new or empty folder, or a PostgreSQL one"

    @staticmethod
    def connect(place: str):
        """A new autocommit connection to ``place`` (a server URL, or a local folder's pgserver) with the ``vector``
        extension and the settings table ready; ``ValueError`` where the server has no pgvector."""
        psycopg = engine_module("psycopg", INSTALL)
        register_vector = engine_module("pgvector.psycopg", INSTALL).register_vector
        conninfo = place if database.is_server(place) else local_server(place).get_uri()
        connection = psycopg.connect(conninfo, autocommit=True)
        connection.add_notice_handler(log_notice)
        if connection.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone() is None:
            try:
                connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as error:
                connection.close()
                raise ValueError(
                    f"the server has no pgvector extension 'vector' ({first_line(error)}): install pgvector "
                    "there, e.g. run the pgvector/pgvector Docker image"
                ) from None
        register_vector(connection)
        registry = f"CREATE TABLE IF NOT EXISTS {REGISTRY} (name text PRIMARY KEY, settings jsonb NOT NULL)"
        with contextlib.suppress(psycopg.errors.UniqueViolation):  # two first connections at once: one creates it
            connection.execute(registry)
        return connection

    @staticmethod
    def exists(client, name: str) -> bool:
        return client.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()[0]

    @staticmethod
    def metadata(client, name: str) -> dict[str, Any]:
        row = client.execute(f"SELECT settings FROM {REGISTRY} WHERE name = %s", (name,)).fetchone()
        return {} if row is None else row[0]

    @classmethod
    def is_database(cls, path: Path) -> bool:
        return (path / "PG_VERSION").is_file()

    @classmethod
    def check_uri(cls, place: str, name: str) -> None:
        if database.is_server(place) and not place.startswith(("postgres://", "postgresql://")):
            raise ValueError(f"uri {place}: a PostgreSQL database is a postgresql:// URL or a local folder")
        if not TABLE_NAME.fullmatch(name) or name == REGISTRY:
            raise ValueError(f"uri {place}#{name}: a table name is lower-case letters, digits and '_', not {REGISTRY}")
        if len(name) > MAX_TABLE_NAME:  # PostgreSQL cuts names at 63 bytes: the ANN tables' would collide
            raise ValueError(
                f"uri {cls.shareable(place)}#{name}: a table name is at most {MAX_TABLE_NAME} characters (its ANN "
                f"tables add '{LONGEST_ANN_SUFFIX}', PostgreSQL keeps {POSTGRES_NAME_BYTES} bytes), got {len(name)}"
            )

    @classmethod
    def shareable(cls, uri: str) -> str:
        """``uri`` without a password (in the user part or a ``password=`` parameter): what the index writes into its
        settings and messages; the connection then takes the password from ``PGPASSWORD`` or ``~/.pgpass``."""
        if not database.is_server(uri):
            return uri
        parts = urllib.parse.urlsplit(uri)
        netloc = parts.netloc
        if "@" in netloc:
            user, host = netloc.rsplit("@", 1)
            netloc = f"{user.split(':', 1)[0]}@{host}"
        query = urllib.parse.urlencode(
            [
                (key, value)
                for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
                if key != "password"
            ]
        )
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))

    def identifier(self, name: str | None = None):
        return sql_module().Identifier(name or self.name)

    @contextlib.contextmanager
    def connected(self) -> Iterator[None]:
        """The server's connection errors (a server stopped or gone since the index was opened) as one ``ValueError``
        naming the table, not psycopg's ``OperationalError``."""
        try:
            yield
        except engine_module("psycopg", INSTALL).OperationalError as error:
            where = f"{self.shareable(self.uri)}: the connection to the PostgreSQL server of table {self.name!r} failed"
            raise ValueError(
                f"{where} ({first_line(error)}): start the server again, then open the index again"
            ) from None

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """One transaction holding the server's advisory lock of this table: every writer, on any machine, waits for
        it; the add is committed whole at the end, or rolled back (a writer that dies releases it)."""
        with self.connected(), self.client.transaction():
            self.client.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(self.name.encode()),))
            yield

    @contextlib.contextmanager
    def reserving(self) -> Iterator[None]:
        """The same advisory lock held by this connection outside any transaction, so that the rows it removes and the
        count it commits are seen by the Ray workers writing meanwhile (a transaction would hold their rows' ids)."""
        key = zlib.crc32(self.name.encode())
        with self.connected():
            self.client.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                self.client.execute("SELECT pg_advisory_unlock(%s)", (key,))

    def new_collection(self, settings: dict[str, Any]) -> None:
        sql = sql_module()
        columns = [sql.SQL("id bigint PRIMARY KEY"), sql.SQL("sentence text")]
        columns += [
            sql.SQL("{} vector({}) NOT NULL").format(sql.Identifier(name), sql.Literal(size))
            for name, size in self.sizes().items()
        ]
        with self.client.transaction():
            self.client.execute(sql.SQL("CREATE TABLE {} ({})").format(self.identifier(), sql.SQL(", ").join(columns)))
            self.register(self.name, {database.SETTINGS_KEY: settings})

    def register(self, name: str, metadata: dict[str, Any]) -> None:
        json = engine_module("psycopg.types.json", INSTALL).Jsonb
        self.client.execute(
            f"INSERT INTO {REGISTRY} (name, settings) VALUES (%s, %s) "
            "ON CONFLICT (name) DO UPDATE SET settings = excluded.settings",
            (name, json(metadata)),
        )

    def new_ann_collection(self, name: str, width: int, metadata: dict[str, Any]) -> None:
        sql = sql_module()
        create = sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, vector vector({}) NOT NULL)")
        self.client.execute(create.format(self.identifier(name), sql.Literal(width)))
        self.register(name, metadata)

    def new_ann_table(self, direction: str, ids: np.ndarray, vectors: np.ndarray, metadata: dict[str, Any]) -> str:
        """The ANN table, then its HNSW index (built once its rows are in: faster than row by row)."""
        name = super().new_ann_table(direction, ids, vectors, metadata)
        sql = sql_module()
        index = sql.SQL("CREATE INDEX ON {} USING hnsw (vector vector_ip_ops) WITH (m = {}, ef_construction = {})")
        self.client.execute(
            index.format(self.identifier(name), sql.Literal(HNSW_NEIGHBOURS), sql.Literal(HNSW_EF_CONSTRUCTION))
        )
        return name

    def drop(self, name: str) -> None:
        self.client.execute(sql_module().SQL("DROP TABLE IF EXISTS {}").format(self.identifier(name)))
        self.client.execute(f"DELETE FROM {REGISTRY} WHERE name = %s", (name,))

    def vector_sizes(self) -> dict[str, int]:
        """The dimension of each ``vector`` column (its type modifier)."""
        rows = self.client.execute(
            "SELECT attname, atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
            "AND NOT attisdropped AND atttypid = 'vector'::regtype",
            (self.name,),
        ).fetchall()
        return dict(rows)

    def write_settings(self, settings: dict[str, Any]) -> None:
        self.register(self.name, {database.SETTINGS_KEY: settings})

    def discard_from(self, first_id: int) -> None:
        """Nothing: an add is one transaction, so no row of an unfinished one was ever committed."""

    def delete_from(self, first_id: int) -> None:
        """Remove the rows of id ``first_id`` on (those of a Ray build whose workers wrote, then died uncounted)."""
        query = sql_module().SQL("DELETE FROM {} WHERE id >= %s").format(self.identifier())
        self.client.execute(query, (first_id,))

    def holds_unfinished(self, rows: int) -> bool:
        return True  # Ray workers commit rows before the count does; bounding the scan by id costs nothing in SQL

    def replace(self, ids: np.ndarray, columns: dict[str, Any]) -> None:
        """One transaction: the rows of ``ids`` removed, then copied in."""
        query = sql_module().SQL("DELETE FROM {} WHERE id = ANY(%s)").format(self.identifier())
        with self.client.transaction():
            self.client.execute(query, ([int(row_id) for row_id in ids],))
            self.insert(ids, columns)

    def row_count(self, table: str) -> int:
        return self.client.execute(
            sql_module().SQL("SELECT count(*) FROM {}").format(self.identifier(table))
        ).fetchone()[0]

    def insert(self, ids: np.ndarray, columns: dict[str, Any], table: str | None = None) -> None:
        """Rows ``ids`` with their ``columns`` in one binary ``COPY``."""
        sql = sql_module()
        names = ["id", *columns]
        types = ["int8", *("text" if name == "sentence" else "vector" for name in columns)]
        copy = sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(
            self.identifier(table), sql.SQL(", ").join(map(sql.Identifier, names))
        )
        values = [columns[name] for name in columns]
        with self.client.cursor() as cursor, cursor.copy(copy) as rows:
            rows.set_types(types)
            for row, row_id in enumerate(ids):
                rows.write_row([int(row_id), *(column[row] for column in values)])

    def read_page(self, first_id: int, cursor: int | None) -> tuple[list[dict[str, Any]], int | None]:
        start = first_id if cursor is None else cursor
        query = sql_module().SQL("SELECT id, mu, logvar, sentence FROM {} WHERE id >= %s ORDER BY id LIMIT %s")
        rows = self.client.execute(query.format(self.identifier()), (start, ROWS_PER_READ)).fetchall()
        page = [as_row(row) for row in rows]
        return page, (page[-1]["id"] + 1 if len(page) == ROWS_PER_READ else None)

    def read_ids(self, ids: np.ndarray) -> list[dict[str, Any]]:
        query = sql_module().SQL("SELECT id, mu, logvar, sentence FROM {} WHERE id = ANY(%s)").format(self.identifier())
        rows = self.client.execute(query, (ids.tolist(),)).fetchall()
        return [as_row(row) for row in rows]

    def search(
        self, vectors: np.ndarray, count: int, direction: str, first_id=0, ann=None, options=None, end_id=None
    ) -> list:
        """Per query the ids of smallest ``<#>`` (largest raw inner product): a sequential scan of the map column, or
        the HNSW index of ``ann`` with ``hnsw.ef_search`` = max(``ef_search``, ``count``) (at most 1,000)."""
        sql = sql_module()
        if ann is None:
            query = sql.SQL("SELECT id FROM {} WHERE id >= %s AND id < %s ORDER BY {} <#> %s LIMIT %s").format(
                self.identifier(), sql.Identifier(self.map_fields[direction])
            )
            end = np.iinfo(np.int64).max if end_id is None else end_id
            arguments = [(first_id, end, row.astype(np.float32), count) for row in vectors]
        else:
            query = sql.SQL("SELECT id FROM {} ORDER BY vector <#> %s LIMIT %s").format(self.identifier(ann.table))
            arguments = [(row.astype(np.float32), count) for row in vectors]
        found = []
        with self.client.transaction():  # the ef_search setting lives as long as this transaction
            if ann is not None:
                ef_search = max(
                    options["ef_search"], count
                )  # both at most MAX_EF_SEARCH (max_ef_search, max_shortlist)
                self.client.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(ef_search),))
            for argument in arguments:
                found.append([row[0] for row in self.client.execute(query, argument).fetchall()])
        return found


class PgvectorFlat(DatabaseBackend):
    """``backend="pgvector"``: the PostgreSQL table at the ``uri`` option, searched by a flat raw inner-product scan."""

    name = PGVECTOR
    store_class = PgStore


class PgvectorHnsw(PgvectorFlat):
    """``backend="pgvector-hnsw"``: the PostgreSQL table at the ``uri`` option, searched by pgvector's HNSW index on the
    lifted maps."""

    name = PGVECTOR_HNSW
    approximate = True
