"""The ``milvus`` backend through a Milvus server (Milvus Lite's gRPC server, ``milvus-lite server``, started here in a
temporary folder and stopped at the end), as writers on several machines use it: two writer processes adding 10,000
rows each into one collection at once, and a writer killed mid-add."""

from __future__ import annotations

import os
import signal
import time
import uuid

import pytest
import torch

from bench.common import milvus_lite_server
from gausscse import GaussianEmbeddings
from gausscse.search import GaussianIndex

from .test_search import check_against_brute_force, gaussians
from .test_search_pgvector import check_retried_writes, check_two_writers, start_large_add


@pytest.fixture(scope="module")
def milvus_server(tmp_path_factory) -> str:
    """The URL of a Milvus Lite gRPC server of a temporary data folder (its own process), stopped at the end."""
    with milvus_lite_server(tmp_path_factory.mktemp("milvus_lite_server")) as url:
        yield url


@pytest.fixture
def new_uri(milvus_server):
    """``new_uri()``: a new collection's uri on the module's server."""
    return lambda: f"{milvus_server}#c{uuid.uuid4().hex[:12]}"


def test_two_writer_processes_at_once_number_their_rows_apart(new_uri, tmp_path):
    """Two processes adding 10,000 rows each into one collection of the server at once (``check_two_writers``); the
    lock collection gone with the last writer."""
    store = check_two_writers("milvus", new_uri(), tmp_path).engine.table
    assert store.read_holder(f"{store.name}_writer") is None


def test_a_batch_written_again_is_one_row_per_gaussian_and_the_table_is_counted(new_uri):
    """``check_retried_writes``: Milvus upserts a row over the row of its id."""
    check_retried_writes("milvus", new_uri())


def test_a_writer_killed_mid_add_leaves_nothing_served_and_the_next_add_goes_on(new_uri, tmp_path):
    """A writer killed while its rows go in: a reader still has the 10 rows of the add before (the killed add's rows
    are never served), and the next writer clears the dead one's lock and adds on."""
    uri = new_uri()
    first = gaussians(10, seed=14)
    GaussianIndex(12, "sum", "milvus", uri=uri).add(first)
    process = start_large_add("milvus", uri, 200_000, tmp_path)
    store = GaussianIndex.open("milvus", uri).engine.table
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and store.row_count(store.name) <= 10:  # killed once its rows go in
        time.sleep(0.05)
    inserted = store.row_count(store.name)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    assert 10 < inserted < 200_010, "the writer was not killed mid-add"
    reopened = GaussianIndex.open("milvus", uri)
    queries, more = gaussians(3, seed=15), gaussians(5, seed=16)
    assert len(reopened) == 10
    check_against_brute_force(reopened, queries, first, 3)  # a shortlist (2 × 3 < 10) from the engine, dead rows in it
    reopened.add(more)  # the dead writer's lock (a process of this machine that has ended) is cleared
    both = GaussianEmbeddings(torch.cat([first.mu, more.mu]), torch.cat([first.logvar, more.logvar]))
    check_against_brute_force(GaussianIndex.open("milvus", uri), queries, both, 15)
