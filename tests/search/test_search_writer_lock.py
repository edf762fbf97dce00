"""The writers' lock of the Qdrant and Milvus backends, held by the engine (a ``<index>_writer`` collection) instead of
a file of one machine: two processes take turns through a real Milvus server (the ``milvus`` package's, started here
in a temporary folder), two writers at once number their rows apart, a dead writer's lock of this machine is
cleared, another machine's is waited for and named."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
import torch

from gausscse import GaussianEmbeddings
from gausscse.search import GaussianIndex
from gausscse.search.backends.milvus_backend import MilvusStore

from ..helpers import run_together
from .test_search import check_against_brute_force, gaussians
from .test_search_servers import ENGINES

TURNS = 25
TAKER = """
import sys, time
from pathlib import Path
from gausscse.search.backends.milvus_backend import MilvusStore
store, counter = MilvusStore(sys.argv[1], {"dim": 8}), Path(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()  # both start together
for _ in range(int(sys.argv[3])):
    with store.writing():  # a read, a pause, a write: counts are lost unless one process at a time
        seen = int(counter.read_text())
        time.sleep(0.01)
        counter.write_text(str(seen + 1))
"""


@pytest.fixture(scope="module")
def milvus_server(tmp_path_factory):
    """The URL of a Milvus server (standalone, its own processes) in a temporary folder, stopped at the end."""
    from milvus import MilvusServer

    server = MilvusServer()
    server.set_base_dir(str(tmp_path_factory.mktemp("milvus_server")))
    server.start()
    yield f"http://127.0.0.1:{server.listen_port}"
    server.stop()


def test_two_processes_take_turns_through_a_milvus_server(milvus_server, tmp_path):
    """Two processes each take the lock of one collection name ``TURNS`` times through the server and, holding it,
    read a counter, wait and write it back plus one: no count is lost (with no lock, about half are). The server
    takes a second request for an existing collection as a retry where every parameter is the same: each writer's
    token keeps theirs apart."""
    counter = tmp_path / "counter"
    counter.write_text("0")
    uri = f"{milvus_server}#turns"
    run_together([[TAKER, uri, str(counter), str(TURNS)]] * 2, tmp_path, timeout=300)
    assert int(counter.read_text()) == 2 * TURNS
    assert not MilvusStore(uri, {"dim": 8}).exists(MilvusStore.connect(milvus_server), "turns_writer")


def local_uri(engine: str, folder: Path, memory: bool = False) -> str:
    """A new collection's uri in a database of ``engine`` in ``folder`` (Qdrant with ``memory``: in memory)."""
    database = folder / ("qdrant" if engine == "qdrant" else "gaussians.db")
    place = ":memory:" if memory and engine == "qdrant" else database
    return f"{place}#c{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("engine", ENGINES)
def test_two_writers_at_once_number_their_rows_apart(engine, tmp_path):
    """Two handles of one index adding 10 batches of 60 rows each at the same time (threads: the local modes serve
    one process; Qdrant's in-memory store, as its embedded folder's SQLite takes one thread): 1,200 rows of distinct
    ids, each writer's batches whole and in its order, the lock gone."""
    uri = local_uri(engine, tmp_path, memory=True)
    GaussianIndex(8, "sum", engine, uri=uri)
    batches = {seed: [gaussians(60, seed=100 * seed + batch, dim=8) for batch in range(10)] for seed in (1, 2)}
    sentences = {seed: [[f"{seed}"] * 60 for _ in range(10)] for seed in (1, 2)}
    failures = []

    def write(seed: int) -> None:
        try:
            index = GaussianIndex.open(engine, uri)
            for batch, texts in zip(batches[seed], sentences[seed], strict=True):
                index.add(batch, texts)
        except Exception as error:  # reported by the test's thread
            failures.append(error)

    writers = [threading.Thread(target=write, args=(seed,)) for seed in (1, 2)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=300)
    assert not failures, failures
    index = GaussianIndex.open(engine, uri)
    assert len(index) == 1200
    stored, written = index.embeddings, index.engine.sentences(list(range(1200)))
    for seed in (1, 2):
        rows = [row for row, text in enumerate(written) if text == str(seed)]
        expected = torch.cat([batch.mu for batch in batches[seed]])
        torch.testing.assert_close(stored.mu[rows], expected, rtol=0, atol=0)
    store = index.engine.table
    assert store.read_holder(f"{store.name}_writer") is None


@pytest.mark.parametrize("engine", ENGINES)
def test_a_dead_writers_lock_is_cleared_and_another_machines_named(engine, tmp_path, monkeypatch):
    """A lock whose holder is an ended process of this machine is cleared by the next writer; one held on another
    machine is waited for ``lock_timeout`` seconds, then named in the error, and nothing is written."""
    uri = local_uri(engine, tmp_path)
    first = gaussians(10, seed=3, dim=8)
    index = GaussianIndex(8, "sum", engine, uri=uri)
    index.add(first)
    store = index.engine.table
    lock = f"{store.name}_writer"
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = {"host": __import__("socket").gethostname(), "pid": int(ended.stdout), "token": "dead"}
    store.new_lock(lock, json.dumps(dead))
    more = gaussians(5, seed=4, dim=8)
    index.add(more)
    both = GaussianEmbeddings(torch.cat([first.mu, more.mu]), torch.cat([first.logvar, more.logvar]))
    check_against_brute_force(GaussianIndex.open(engine, uri), gaussians(3, seed=5, dim=8), both, 15)
    store.new_lock(lock, json.dumps({"host": "elsewhere", "pid": 1, "token": "alive"}))
    monkeypatch.setattr(type(store), "lock_timeout", 0.3)
    with pytest.raises(TimeoutError, match=rf"'{lock}' says elsewhere, process 1 is writing: wait, or drop it"):
        index.add(gaussians(5, seed=6, dim=8))
    assert len(GaussianIndex.open(engine, uri)) == 15
    with pytest.raises(ValueError, match=r"is the name of the writers' lock of an index named 'docs': choose another"):
        GaussianIndex(8, "sum", engine, uri=local_uri(engine, tmp_path).split("#")[0] + "#docs_writer")
