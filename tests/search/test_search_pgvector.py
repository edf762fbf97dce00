"""The pgvector backends against a real PostgreSQL server (pgserver's, started by the tests in a temporary folder and
stopped when they end): exact top-k identical to the ``torch`` backend in both directions, with and without the
search score, after adds and reopening (by uri, by folder, in a fresh process); HNSW recall; the raw maps under a raw
inner product; nothing per item in the client; two writer processes at once; a writer killed mid-add; a table never
overwritten; named errors; the command line."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest
import torch
from pgserver.postgres_server import pg_ctl

from gausscse import GaussianEmbeddings
from gausscse.cli.search import main as search_main
from gausscse.model.gaussian import query_map, stored_map
from gausscse.search import GaussianIndex
from gausscse.search.backends.pgvector_backend import local_server

from ..helpers import run_together
from .test_search import CORPUS, check_against_brute_force, gaussians
from .test_search import tiny_model_folder as tiny_model_folder  # the fixture, used by name
from .test_search_servers import assert_same_as, random_gaussians


@pytest.fixture(scope="module")
def server_folder(tmp_path_factory) -> str:
    """The module's local PostgreSQL database folder (pgserver starts its server on first use), its server stopped at
    the end: pgserver stops it when the last process that used it exits, and a writer killed here never does."""
    folder = tmp_path_factory.mktemp("postgres") / "pgdata"
    yield str(folder)
    if (folder / "postmaster.pid").is_file():
        server = local_server(str(folder))
        pg_ctl(["-w", "stop", "-m", "fast"], pgdata=folder, user=server.system_user)
        assert not (folder / "postmaster.pid").exists()


@pytest.fixture
def new_uri(server_folder):
    """``new_uri()``: a new table's uri in the module's database."""
    return lambda: f"{server_folder}#t{uuid.uuid4().hex[:12]}"


def recall_at_10(index: GaussianIndex, exact: GaussianIndex, queries: GaussianEmbeddings, direction: str) -> float:
    found, expected = getattr(index, direction)(queries, 10)[1], getattr(exact, direction)(queries, 10)[1]
    return sum(len(set(a.tolist()) & set(b.tolist())) for a, b in zip(found, expected, strict=True)) / expected.numel()


@pytest.mark.parametrize("kl_weight", [None, 0.5])
def test_exact_top_k_is_the_torch_backends_after_adds_and_reopening(kl_weight, new_uri):
    items, queries = random_gaussians(1500, seed=1, dim=64), random_gaussians(12, seed=2, dim=64)
    exact = GaussianIndex(64, "mean_kl", kl_weight=kl_weight)
    exact.add(items)
    uri = new_uri()
    index = GaussianIndex(64, "mean_kl", "pgvector", uri=uri, kl_weight=kl_weight)
    index.add(items[:1000])
    index.add(items[1000:], [f"sentence {row}" for row in range(1000, 1500)])
    assert len(index) == 1500 and index.mu.shape[0] == 0  # nothing per item in this process
    assert_same_as(index, exact, queries, 10)
    reopened = GaussianIndex.open("pgvector", uri)
    assert len(reopened) == 1500 and reopened.mu.shape[0] == 0
    assert_same_as(reopened, exact, queries, 10)
    assert reopened.engine.sentences([999, 1000, 1499]) == [None, "sentence 1000", "sentence 1499"]
    torch.testing.assert_close(reopened.embeddings.logvar, items.logvar, rtol=0, atol=0)  # float32 both ways


def test_a_small_index_against_torch_distributions_and_reopened_by_folder_and_in_a_fresh_process(tmp_path):
    items, queries = gaussians(40, seed=3), gaussians(4, seed=4)
    folder = tmp_path / "pgdata"
    index = GaussianIndex(12, "sum", "pgvector", uri=folder)  # the default table of a new local database
    index.add(items)
    check_against_brute_force(index, queries, items, 7)
    loaded = GaussianIndex.load(folder)
    assert loaded.backend == "pgvector" and len(loaded) == 40
    check_against_brute_force(loaded, queries, items, 7)
    code = (
        "import torch\nfrom gausscse.search import GaussianIndex\nfrom gausscse import GaussianEmbeddings\n"
        f"index = GaussianIndex.load({str(folder)!r})\n"
        f"queries = GaussianEmbeddings(torch.tensor({queries.mu.tolist()}), torch.tensor({queries.logvar.tolist()}))\n"
        "print(index.entailing(queries, 7)[1].tolist())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == index.entailing(queries, 7)[1].tolist()


def test_hnsw_recall_at_10_and_the_exact_rescore(new_uri):
    items, queries = random_gaussians(4000, seed=5, dim=32), random_gaussians(40, seed=6, dim=32)
    exact = GaussianIndex(32, "sum")
    exact.add(items)
    index = GaussianIndex(32, "sum", "pgvector-hnsw", uri=new_uri())
    index.add(items)
    for direction in ("entailing", "entailed_by"):
        assert recall_at_10(index, exact, queries, direction) >= 0.95, direction
        scores, ids = getattr(index, direction)(queries, 10)  # what is returned is scored exactly
        expected = exact.score(
            (queries.mu[:, None], queries.logvar[:, None]), (items.mu[ids], items.logvar[ids]), direction, True
        )
        torch.testing.assert_close(scores, expected.float(), rtol=1e-6, atol=1e-6)
    index.add(random_gaussians(50, seed=7, dim=32))  # rows after the HNSW build: scanned flat until it is rebuilt
    assert len(GaussianIndex.open("pgvector-hnsw", index.engine.uri)) == 4050
    index.ef_search = 1001  # beyond pgvector's hnsw.ef_search: refused, never clipped silently
    with pytest.raises(ValueError, match=r"ef_search=1001: the PostgreSQL table's HNSW search is at most 1,000 wide"):
        index.entailing(queries, 10)
    uri = new_uri()
    with pytest.raises(ValueError, match="search exactly \\(backend='pgvector'\\)"):
        GaussianIndex(32, "sum", "pgvector-hnsw", uri=uri, ef_search=1001)  # refused where it is given
    assert not index.engine.table.exists(index.engine.table.client, uri.partition("#")[2])  # no table made
    reopened = GaussianIndex.open("pgvector-hnsw", index.engine.uri)
    reopened.ef_search = 1001
    with pytest.raises(ValueError, match="search exactly \\(backend='pgvector'\\)"):
        reopened.entailing(queries, 10)


def test_the_servers_advice_reaches_the_log(new_uri, caplog):
    """pgvector's notice that an HNSW graph outgrew ``maintenance_work_mem`` (a build many times slower) is logged as a
    warning; PostgreSQL's routine notices ("already exists, skipping") stay at debug level."""
    index = GaussianIndex(8, "sum", "pgvector-hnsw", uri=new_uri())
    index.add(random_gaussians(3000, seed=10, dim=8))
    index.engine.table.client.execute("SET maintenance_work_mem = '1MB'")  # this session's graph builds
    with caplog.at_level(logging.DEBUG, logger="gausscse.search.backends.pgvector_backend"):
        index.entailing(random_gaussians(2, seed=11, dim=8), 3)  # the first search builds the graphs
        GaussianIndex.open("pgvector", index.engine.uri)  # a new connection: CREATE ... IF NOT EXISTS notices
    warned = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING]
    assert warned and all("maintenance_work_mem" in message for message in warned), warned
    assert "Increase maintenance_work_mem" in warned[0]
    assert any("skipping" in record.getMessage() for record in caplog.records if record.levelno == logging.DEBUG)


def test_the_table_holds_the_raw_maps_under_a_raw_inner_product(new_uri):
    items, queries = gaussians(20, seed=8), gaussians(3, seed=9)
    index = GaussianIndex(12, "sum", "pgvector", uri=new_uri(), kl_weight=0.25)
    index.add(items)
    client, table = index.engine.table.client, index.engine.table.name
    columns = dict(
        client.execute(
            "SELECT column_name, udt_name FROM information_schema.columns WHERE table_name = %s", (table,)
        ).fetchall()
    )
    assert columns == {"id": "int8", "sentence": "text", **dict.fromkeys(
        ("mu", "logvar", "entailing_vector", "entailed_by_vector"), "vector"
    )}  # fmt: skip
    query = query_map(queries.mu, queries.logvar, "entailing", 0.25).float()
    stored = stored_map(items.mu, items.logvar, "entailing", 0.25).float()
    for row, vector in enumerate(query):
        found = client.execute(f"SELECT id, entailing_vector <#> %s FROM {table} ORDER BY id", (vector.numpy(),))
        inner = torch.tensor([value for _, value in found.fetchall()])
        torch.testing.assert_close(-inner, stored @ vector, rtol=1e-5, atol=1e-4, msg=f"query {row}")  # −⟨q, x⟩


WRITER = """
import sys, torch
from gausscse import GaussianEmbeddings
from gausscse.search import GaussianIndex
seed, engine, uri = int(sys.argv[1]), sys.argv[2], sys.argv[3]
generator = torch.Generator().manual_seed(seed)
index = GaussianIndex.open(engine, uri)
print("ready", flush=True)
sys.stdin.readline()  # both writers start together
for _ in range(10):
    mu = torch.randn(1000, 8, generator=generator)
    index.add(GaussianEmbeddings(mu, torch.randn(1000, 8, generator=generator) * 0.3), [f"{seed}"] * 1000)
"""


def writer_rows(seed: int) -> GaussianEmbeddings:
    """The 10,000 Gaussians the writer of ``seed`` adds, in its order."""
    generator = torch.Generator().manual_seed(seed)
    parts = [
        (torch.randn(1000, 8, generator=generator), torch.randn(1000, 8, generator=generator) * 0.3) for _ in range(10)
    ]
    return GaussianEmbeddings(torch.cat([mu for mu, _ in parts]), torch.cat([logvar for _, logvar in parts]))


def check_two_writers(engine: str, uri: str, tmp_path) -> GaussianIndex:
    """Two processes adding 10,000 rows each into one new index of ``engine`` at ``uri``, in batches, at the same
    time: 20,000 rows of distinct ids 0..19,999, each writer's rows whole and in its order, and the top-10 of the
    union in both directions as the torch backend's. The index, reopened."""
    GaussianIndex(8, "sum", engine, uri=uri)
    run_together([[WRITER, str(seed), engine, uri] for seed in (11, 12)], tmp_path)
    index = GaussianIndex.open(engine, uri)
    assert len(index) == 20_000
    stored = index.embeddings
    sentences = index.engine.sentences(list(range(20_000)))
    for seed in (11, 12):
        rows = [row for row, sentence in enumerate(sentences) if sentence == str(seed)]
        assert len(rows) == 10_000  # each writer's batches whole, its rows in its order
        torch.testing.assert_close(stored.mu[rows], writer_rows(seed).mu, rtol=0, atol=0)
    exact = GaussianIndex(8, "sum")
    exact.add(stored)
    assert_same_as(index, exact, random_gaussians(5, seed=13, dim=8), 10)
    return index


def test_two_writer_processes_at_once_number_their_rows_apart(new_uri, tmp_path):
    check_two_writers("pgvector", new_uri(), tmp_path)


def check_retried_writes(engine: str, uri: str) -> None:
    """Rows written by position in another handle (as ``write_on_ray``'s workers write): a batch written twice (Ray
    running it again after its worker died) leaves one row per Gaussian, at ``first_id + position``; the reserving
    writer counts the table's rows, makes nothing visible when they are not one per Gaussian, and the next one clears
    the rows such a build left."""
    index = GaussianIndex(8, "sum", engine, uri=uri)
    index.add(gaussians(2, seed=30, dim=8), ["a", "b"])
    worker = GaussianIndex.open(engine, uri).engine  # a worker's own handle
    batch, texts = gaussians(8, seed=31, dim=8), [f"row {k}" for k in range(8)]
    with index.engine.reserved(8) as first_id:
        assert first_id == 2
        worker.put(first_id + np.arange(8), batch, texts)
        worker.put(first_id + np.arange(4, 8), batch[4:], texts[4:])  # a batch of it run again
    table = index.engine.table
    assert len(index) == 10 and table.row_count(table.name) == 10
    assert index.engine.sentences(list(range(10))) == ["a", "b", *texts]
    torch.testing.assert_close(index.embeddings.mu[2:], batch.mu, rtol=0, atol=0)
    ids = index.entailing(batch[:3], 10)[1]
    assert all(len(set(row.tolist())) == 10 for row in ids)  # each hit once
    with pytest.raises(RuntimeError, match="holds 3 new rows for 5 sentences written"):
        with index.engine.reserved(5) as first_id:
            worker.put(first_id + np.arange(3), batch[:3], texts[:3])  # the other batch lost
    assert len(index) == 10 and len(GaussianIndex.open(engine, uri)) == 10  # nothing of it made visible
    with index.engine.reserved(1) as first_id:
        assert first_id == 10
        worker.put(np.array([first_id]), batch[7:], ["last"])
    assert len(index) == 11 and table.row_count(table.name) == 11  # the lost build's rows cleared
    assert index.engine.sentences([10]) == ["last"]


def test_a_batch_written_again_is_one_row_per_gaussian_and_the_table_is_counted(new_uri):
    check_retried_writes("pgvector", new_uri())


def start_large_add(engine: str, uri: str, rows: int, cwd) -> subprocess.Popen:
    """A process adding ``rows`` random Gaussians (d = 12) to the index at ``uri``, returned once its add begins."""
    writer = f"""
import torch
from gausscse import GaussianEmbeddings
from gausscse.search import GaussianIndex
index = GaussianIndex.open({engine!r}, {uri!r})
print("adding", flush=True)
index.add(GaussianEmbeddings(torch.randn({rows}, 12), torch.randn({rows}, 12)))
print("finished", flush=True)
"""
    process = subprocess.Popen([sys.executable, "-c", writer], cwd=cwd, stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "adding"
    return process


def test_a_stopped_server_is_one_error_naming_the_table(tmp_path):
    """An add (and a search) after the server stopped: a ValueError naming the table and what to do, not psycopg's
    OperationalError."""
    folder = tmp_path / "own.pgdata"
    index = GaussianIndex(12, "sum", "pgvector", uri=f"{folder}#stopped")
    index.add(gaussians(3, seed=40))
    pg_ctl(["-w", "stop", "-m", "fast"], pgdata=folder, user=local_server(str(folder)).system_user)
    with pytest.raises(ValueError, match=r"own\.pgdata#stopped: the connection to the PostgreSQL server of table "
                                         r"'stopped' failed \(.*\): start the server again"):  # fmt: skip
        index.add(gaussians(2, seed=41))
    with pytest.raises(ValueError, match=r"'stopped' cannot be read any more"):
        index.entailing(gaussians(1, seed=42), 2)


def test_a_writer_killed_mid_add_leaves_nothing_and_the_next_add_goes_on(new_uri, tmp_path):
    uri = new_uri()
    first = gaussians(10, seed=14)
    GaussianIndex(12, "sum", "pgvector", uri=uri).add(first)
    process = start_large_add("pgvector", uri, 400_000, tmp_path)
    client = GaussianIndex.open("pgvector", uri).engine.table.client
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # killed while its COPY is under way
        copying = client.execute("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'COPY%'").fetchone()[0]
        if copying:
            break
        time.sleep(0.05)
    assert copying, "the writer never started its COPY"
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    reopened = GaussianIndex.open("pgvector", uri)
    assert len(reopened) == 10 and reopened.engine.table.row_count(reopened.engine.table.name) == 10
    queries, more = gaussians(3, seed=15), gaussians(5, seed=16)
    check_against_brute_force(reopened, queries, first, 10)
    reopened.add(more)  # the dead writer's lock is gone with its session
    both = GaussianEmbeddings(torch.cat([first.mu, more.mu]), torch.cat([first.logvar, more.logvar]))
    check_against_brute_force(GaussianIndex.open("pgvector", uri), queries, both, 15)


def test_an_existing_table_is_never_overwritten_and_errors_are_named(new_uri, server_folder, tmp_path):
    uri = new_uri()
    GaussianIndex(12, "sum", "pgvector", uri=uri).add(gaussians(5, seed=17))
    with pytest.raises(
        FileExistsError, match=r"already holds a collection 't\w+': reopen a GaussianIndex there with"
    ) as refused:
        GaussianIndex(12, "sum", "pgvector", uri=uri)
    hint = re.search(r"with (GaussianIndex\.open\('pgvector', '[^']+'\)),", str(refused.value)).group(1)
    assert len(eval(hint)) == 5  # the hint's own code reopens the index
    assert len(GaussianIndex.open("pgvector", uri)) == 5
    name = f"t{uuid.uuid4().hex[:12]}"  # someone's own table, not an index
    GaussianIndex.open("pgvector", uri).engine.table.client.execute(f"CREATE TABLE {name} (id int)")
    with pytest.raises(ValueError, match=rf"PostgreSQL table '{name}' has no GaussianIndex settings"):
        GaussianIndex.open("pgvector", f"{server_folder}#{name}")
    with pytest.raises(FileNotFoundError, match=r"holds no GaussianIndex collection \('nothing_here'\)"):
        GaussianIndex.open("pgvector", f"{server_folder}#nothing_here")
    with pytest.raises(ValueError, match=r"a table name is lower-case letters, digits and '_'"):
        GaussianIndex(12, "sum", "pgvector", uri=f"{server_folder}#Bad-Name")
    with pytest.raises(ValueError, match=r"a PostgreSQL database is a postgresql:// URL or a local folder"):
        GaussianIndex(12, "sum", "pgvector", uri="http://localhost:5432")
    with pytest.raises(ValueError, match=r"postgresql://nobody@127\.0\.0\.1:1/none: PostgreSQL cannot open it"):
        GaussianIndex(12, "sum", "pgvector", uri="postgresql://nobody@127.0.0.1:1/none")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"busy holds notes\.txt: a local PostgreSQL database needs a new or"):
        GaussianIndex(12, "sum", "pgvector", uri=tmp_path / "busy")


def test_cli_builds_and_queries_a_pgvector_index(tiny_model_folder, tmp_path):
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build = ["build", "--model", str(tiny_model_folder), "--corpus", str(corpus_path), "--index", str(tmp_path / "ix")]
    search_main([*build, "--backend", "pgvector"])
    assert json.loads((tmp_path / "ix" / "index_config.json").read_text())["uri"] == str(tmp_path / "ix.pgdata")
    assert not (tmp_path / "ix" / "sentences.jsonl").exists()  # the sentences are in the database only
    from gausscse import GaussCSEModel

    model = GaussCSEModel.from_pretrained(tiny_model_folder).eval()
    distinct = [sentence for sentence in dict.fromkeys(CORPUS) if sentence]
    claims = ["Someone makes music.", "Animals are outside."]
    hits = search_main(["query", "--index", str(tmp_path / "ix"), "--entailing", *claims, "-k", "3"])
    scores = model.similarity(claims, distinct)
    for row, claim_hits in enumerate(hits):
        assert [hit["sentence"] for hit in claim_hits] == [distinct[hit["id"]] for hit in claim_hits]
        best = scores[row].argsort(descending=True)[:3].tolist()
        assert [hit["id"] for hit in claim_hits] == best


def test_a_password_in_the_uri_is_never_written(server_folder, tmp_path):
    """The uri's password (user part or ``password=``) stays out of the index folder: ``index_config.json`` names the
    server without it, and the folder reopens (the password then comes from ``PGPASSWORD`` / ``~/.pgpass``; this
    local server trusts its socket)."""
    socket_uri = local_server(server_folder).get_uri()  # postgresql://postgres:@/postgres?host=<socket folder>
    table = f"t{uuid.uuid4().hex[:12]}"
    secret_uri = socket_uri.replace("postgres:@", "postgres:s3cret-pw@") + f"&password=other-secret#{table}"
    index = GaussianIndex(12, "sum", "pgvector", uri=secret_uri)
    index.add(gaussians(6, seed=21))
    folder = tmp_path / "ix"
    index.save(folder)
    written = b"".join(path.read_bytes() for path in folder.rglob("*") if path.is_file())
    assert b"s3cret-pw" not in written and b"other-secret" not in written
    recorded = json.loads((folder / "index_config.json").read_text())["uri"]
    assert recorded.startswith("postgresql://postgres@/postgres?host=") and recorded.endswith(f"#{table}")
    assert len(GaussianIndex.load(folder)) == 6


def test_a_table_name_postgresql_would_cut_is_refused(new_uri, server_folder):
    """PostgreSQL keeps 63 bytes of a name: the index's ANN tables (``<name>_ann_entailed_by``) must fit whole, or both
    directions would land on one cut name. The longest name allowed builds and searches both directions."""
    with pytest.raises(ValueError, match=r"#x{48}: a table name is at most 47 characters .*got 48"):
        GaussianIndex(8, "sum", "pgvector-hnsw", uri=f"{server_folder}#{'x' * 48}")
    longest = "y" * 40 + uuid.uuid4().hex[:7]
    index = GaussianIndex(8, "sum", "pgvector-hnsw", uri=f"{server_folder}#{longest}")
    items = random_gaussians(600, seed=22, dim=8)
    index.add(items)
    exact = GaussianIndex(8, "sum")
    exact.add(items)
    queries = random_gaussians(5, seed=23, dim=8)
    for direction in ("entailing", "entailed_by"):
        assert recall_at_10(index, exact, queries, direction) >= 0.9, direction
    assert set(index.engine.table.ann_tables()) == {"entailing", "entailed_by"}


@pytest.mark.parametrize("rows", ["abc", -3, 2.5, True, [1]])
def test_a_damaged_row_count_names_the_table_and_the_setting(rows, new_uri):
    uri = new_uri()
    index = GaussianIndex(12, "sum", "pgvector", uri=uri)
    index.add(gaussians(4, seed=24))
    table = index.engine.table
    settings = table.stored_settings()
    table.write_settings({**settings, "rows": rows})
    name = uri.split("#")[1]
    with pytest.raises(ValueError, match=rf"table '{name}' say rows=.*not a row count: the index is damaged"):
        GaussianIndex.open("pgvector", uri)
