"""What a saved index or index database serves is what it was built from: FAISS files checked against the index's
Gaussians, a LanceDB database shared by several writers and readers without duplicate ids or stale shortlists, a
folder that refuses a database rebuilt for another corpus, and output places checked before any work."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from gausscse import GaussianEmbeddings
from gausscse.cli.search import main as search_main
from gausscse.search import GaussianIndex, SentenceIndex

from .test_search import CORPUS, built_twice_in_one_database, gaussians
from .test_search import tiny_model_folder as tiny_model_folder  # the fixture, used by name

ROOT = Path(__file__).resolve().parents[2]


def exact_top(index_items: GaussianEmbeddings, queries: GaussianEmbeddings, k: int) -> list[list[int]]:
    """The top k ids by sim(q‖x) of a fresh exact index over ``index_items``."""
    exact = GaussianIndex(12, "sum")
    exact.add(index_items)
    return exact.entailing(queries, k)[1].tolist()


@pytest.mark.parametrize("backend", ["faiss", "faiss-hnsw"])
def test_a_faiss_file_of_another_index_or_direction_is_refused_on_load(backend, tmp_path):
    """A FAISS file of another dimension, or the other direction's file put in its place (same size and dimension,
    manifest written again), is refused on load naming the file; the old load checked only the vector count."""
    from gausscse.io import write_manifest

    items = gaussians(200, seed=50)
    index = GaussianIndex(12, "sum", backend)
    index.add(items)
    index.save(tmp_path / "index")
    swapped = tmp_path / "swapped"
    shutil.copytree(tmp_path / "index", swapped)
    (swapped / "entailing.faiss").write_bytes((tmp_path / "index" / "entailed_by.faiss").read_bytes())
    if backend == "faiss-hnsw":
        transform = (tmp_path / "index" / "entailed_by.transform.safetensors").read_bytes()
        (swapped / "entailing.transform.safetensors").write_bytes(transform)
    (swapped / "manifest.json").unlink()
    write_manifest(swapped)
    with pytest.raises(ValueError, match=r"faiss does not hold the entailing vectors.*another index or direction"):
        GaussianIndex.load(swapped)
    other = GaussianIndex(8, "sum", backend)
    other.add(GaussianEmbeddings(items.mu[:, :8], items.logvar[:, :8]))
    other.save(tmp_path / "other")
    wrong_dimension = tmp_path / "wrong-dimension"
    shutil.copytree(tmp_path / "index", wrong_dimension)
    (wrong_dimension / "entailing.faiss").write_bytes((tmp_path / "other" / "entailing.faiss").read_bytes())
    (wrong_dimension / "manifest.json").unlink()
    write_manifest(wrong_dimension)
    with pytest.raises(ValueError, match=r"faiss holds 18-dimensional vectors; this index's are 26: the file belongs"):
        GaussianIndex.load(wrong_dimension)
    assert len(GaussianIndex.load(tmp_path / "index")) == 200  # the genuine folder still loads


@pytest.mark.parametrize("backend", ["faiss", "faiss-hnsw"])
def test_a_faiss_file_of_items_that_differ_in_one_row_is_refused(backend, tmp_path):
    """Every stored vector is checked, not a sample: the file of an index whose items differ from this one's in a
    single row (set to the query, so the swapped file would hide the right answer) is refused."""
    from gausscse.io import write_manifest

    items, query = gaussians(100, seed=52), gaussians(1, seed=53)
    changed = GaussianEmbeddings(items.mu.clone(), items.logvar.clone())
    changed.mu[3], changed.logvar[3] = query.mu[0], query.logvar[0]
    for name, stored in (("original", items), ("changed", changed)):
        index = GaussianIndex(12, "sum", backend)
        index.add(stored)
        index.save(tmp_path / name)
    for path in (tmp_path / "original").glob("entailing.*"):
        shutil.copyfile(path, tmp_path / "changed" / path.name)
    (tmp_path / "changed" / "manifest.json").unlink()
    write_manifest(tmp_path / "changed")
    with pytest.raises(ValueError, match=r"entailing\.faiss does not hold the entailing vectors"):
        GaussianIndex.load(tmp_path / "changed")


def test_a_database_needs_a_folder_of_its_own_and_a_deleted_one_is_named(tmp_path):
    """A LanceDB index is refused in a folder holding anything else (a saved index, a model: it wrote its table there
    and a later save of that folder deleted it); an open handle whose database was deleted, and a saved index whose
    database is gone, are named in one line (LanceDB's own error was a Rust "Not found ... commit.rs")."""
    saved = GaussianIndex(12, "sum")
    saved.add(gaussians(5, seed=54))
    saved.save(tmp_path / "saved")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    for folder, held in (("saved", "index_config.json"), ("model", "config.json")):
        with pytest.raises(
            FileExistsError, match=rf"{folder} holds .*{held}.*: a LanceDB database needs a new or empty"
        ):
            GaussianIndex(12, "sum", "lancedb", uri=tmp_path / folder)
    assert sorted(path.name for path in (tmp_path / "model").iterdir()) == ["config.json"]
    index = GaussianIndex(12, "sum", "lancedb", uri=tmp_path / "db")
    index.add(gaussians(5, seed=55))
    SentenceIndex(index, [f"s{row}" for row in range(5)]).save(tmp_path / "corpus")
    shutil.rmtree(tmp_path / "db")
    with pytest.raises(ValueError, match=r"db: the database cannot be read any more"):
        index.entailing(gaussians(1, seed=56), 2)
    with pytest.raises(FileNotFoundError, match=r"config\.json names the database .*db, which is gone \(.*does not"):
        SentenceIndex.load(tmp_path / "corpus")
    assert not (tmp_path / "db").exists()  # looking did not create it


def test_two_handles_of_one_database_number_rows_apart_and_see_each_others_rows(tmp_path):
    """Two handles of one database adding in turn: ids stay 0..n-1 (the old handles both numbered from their own
    length, and every later load failed), each handle searches the other's rows too, and a fresh load agrees."""
    batches = [gaussians(20, seed=seed) for seed in (60, 61, 62)]
    GaussianIndex(12, "sum", "lancedb", uri=tmp_path / "db").add(batches[0])
    first, second = GaussianIndex.load(tmp_path / "db"), GaussianIndex.load(tmp_path / "db")
    first.add(batches[1])
    second.add(batches[2])
    everything = GaussianEmbeddings(
        *(torch.cat([batch.mu if name == "mu" else batch.logvar for batch in batches]) for name in ("mu", "logvar"))
    )
    reloaded = GaussianIndex.load(tmp_path / "db")
    assert len(reloaded) == 60
    torch.testing.assert_close(reloaded.embeddings.mu, everything.mu)
    queries = gaussians(3, seed=63)
    expected = exact_top(everything, queries, 5)
    for handle in (first, second, reloaded):
        assert handle.entailing(queries, 5)[1].tolist() == expected
        assert len(handle) == 60


WRITER = """
import os, sys, time
sys.path.insert(0, {root!r})
from gausscse.search import GaussianIndex
from tests.search.test_search import gaussians
index = GaussianIndex.load({uri!r})
open({ready!r}, "w").close()
while not os.path.exists({go!r}):
    time.sleep(0.01)
for seed in range({first}, {first} + 8):
    index.add(gaussians(5, seed=seed), [f"s{{seed}}-{{row}}" for row in range(5)])
"""


def test_two_processes_adding_at_once_leave_a_loadable_database(tmp_path):
    """Two processes add eight batches each to one database at the same time: no duplicate id, every row there."""
    GaussianIndex(12, "sum", "lancedb", uri=tmp_path / "db").add(gaussians(5, seed=0), ["s0"] * 5)
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    go = tmp_path / "go"
    writers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WRITER.format(
                    root=str(ROOT),
                    uri=str(tmp_path / "db"),
                    first=first,
                    ready=str(tmp_path / f"ready{first}"),
                    go=str(go),
                ),
            ],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for first in (100, 200)
    ]
    deadline = time.monotonic() + 240
    while not all((tmp_path / f"ready{first}").exists() for first in (100, 200)) and time.monotonic() < deadline:
        time.sleep(0.05)
    go.touch()  # both loaded the 5-row database: now both add at once
    for writer in writers:
        assert writer.wait(timeout=300) == 0, writer.stderr.read()[-2000:]
    index = GaussianIndex.load(tmp_path / "db")
    assert len(index) == 5 + 2 * 8 * 5
    _, sentences = index.engine.table.read()
    assert sorted(sentences[5:]) == sorted(
        f"s{seed}-{row}" for seed in [*range(100, 108), *range(200, 208)] for row in range(5)
    )


def test_an_ann_reader_sees_rows_and_ann_tables_another_handle_rebuilt(tmp_path):
    """A lancedb-ann handle that searched (ANN tables built on its 300 rows), then another handle adds 400 rows and
    rebuilds the ANN tables: the first handle's next search reads the new rows and tables (the old one failed with
    an IndexError on ids past its 300) and finds what an exact index finds."""
    items = gaussians(700, seed=70)
    reader = GaussianIndex(12, "sum", "lancedb-ann", uri=tmp_path / "db")
    reader.add(items[:300])
    queries = gaussians(4, seed=71)
    reader.entailing(queries, 5)
    writer = GaussianIndex.load(tmp_path / "db")
    writer.add(items[300:])
    writer.entailing(queries, 5)  # 400 new rows outnumber the 300 indexed: the ANN tables are rebuilt
    _, ids = reader.entailing(queries, 5)
    assert len(reader) == 700
    expected = exact_top(items, queries, 5)
    found = sum(len(set(a) & set(b)) for a, b in zip(ids.tolist(), expected, strict=True))
    assert found >= 0.8 * ids.numel(), (ids.tolist(), expected)


def test_an_index_folder_refuses_a_database_rebuilt_for_another_corpus(tmp_path):
    """Index A keeps its database at D; D is deleted and index B built there (same size): loading A names the
    replaced database instead of serving B's Gaussians beside A's sentences."""
    built = built_twice_in_one_database("lancedb", tmp_path / "db", lambda: shutil.rmtree(tmp_path / "db"), tmp_path)
    with pytest.raises(ValueError, match=r"was built on the LanceDB table \w+ at .*db, which now holds another one"):
        SentenceIndex.load(tmp_path / "A")
    with pytest.raises(ValueError, match="now holds another GaussianIndex table"):
        built["A"].entailing(gaussians(1, seed=82), 3)  # a handle open on A sees the replacement too


def test_sentences_that_are_not_strings_are_named(tmp_path):
    index = GaussianIndex(12, "sum", "lancedb", uri=tmp_path / "db")
    with pytest.raises(ValueError, match=r"sentences\[0\] must be a string, got int"):
        index.add(gaussians(2, seed=1), [1, 2])
    assert len(index) == 0 and len(GaussianIndex.load(tmp_path / "db")) == 0


@pytest.mark.parametrize("uri", ["idx/db", "idx", "."])
def test_a_database_inside_the_index_folder_is_refused_before_encoding(uri, tiny_model_folder, tmp_path, monkeypatch):
    """``--uri`` inside ``--index`` (or the index inside the database): the index's folder swap deleted the new
    database and replaced a working index with a broken one; now one error before anything is encoded or written."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build = ["build", "--model", str(tiny_model_folder), "--corpus", "corpus.txt", "--index", "idx"]
    search_main([*build])  # a working torch index at idx
    before = sorted(path.name for path in (tmp_path / "idx").iterdir())
    index_uri = "idx" if uri == "." else uri
    with pytest.raises(
        ValueError, match=r"--uri \S+ (is|lies inside|holds) the folder of --index idx: saving the index would replace"
    ):
        search_main([*build, "--backend", "lancedb", "--uri", index_uri])
    with pytest.raises(ValueError, match=r"--uri \S*idx holds .*index_config\.json.*: a LanceDB database needs"):
        search_main([*build[:-1], "other", "--backend", "lancedb", "--uri", "idx"])  # another index's folder
    assert sorted(path.name for path in (tmp_path / "idx").iterdir()) == before
    assert len(SentenceIndex.load(tmp_path / "idx")) == len({line for line in CORPUS if line})


def test_unwritable_and_impossible_output_places_fail_before_the_work(tiny_model_folder, tmp_path, monkeypatch):
    """An index in a folder that takes no entries, in a file, or as the working directory: one ValueError naming
    ``--index`` before the corpus is read or encoded (the old build encoded everything, then raised PermissionError)."""
    from gausscse.cli import search as search_cli

    (tmp_path / "corpus.txt").write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    (tmp_path / "a-file").write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)

    def no_encoding(*args, **kwargs):
        raise AssertionError("the corpus was read before the output place was checked")

    monkeypatch.setattr(search_cli, "read_corpus", no_encoding)
    monkeypatch.chdir(tmp_path)
    build = ["build", "--model", str(tiny_model_folder), "--corpus", "corpus.txt", "--index"]
    cases = {
        "/proc/gausscse-index": r"--index /proc/gausscse-index: cannot write in /proc",
        "a-file": r"--index a-file is a file, not a folder",
        "a-file/index": r"--index a-file/index: .*a-file is a file, not a folder",
        ".": r"--index \. is the working directory or holds it",
    }
    if os.geteuid() != 0:  # root writes anywhere the file system allows
        cases[str(locked / "index")] = r"cannot write in .*locked"
    try:
        for path, message in cases.items():
            with pytest.raises(ValueError, match=message):
                search_main([*build, path])
    finally:
        locked.chmod(0o700)
