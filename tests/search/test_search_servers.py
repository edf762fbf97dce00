"""The Qdrant and Milvus backends, in their local modes (Qdrant's embedded folder or ``:memory:``, a Milvus Lite
file): exact top-k identical to the ``torch`` backend on 10,000 Gaussians of d = 384 after adds and after reopening,
a brute force from torch.distributions, approximate recall@10, raw inner products in the database, no overwritten
collection, refused settings and replaced collections, and the command line. One database per engine is shared by the
module (one Milvus Lite process), each test in collections of its own."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
import torch

from gausscse import GaussianEmbeddings
from gausscse.cli.search import main as search_main
from gausscse.io import write_manifest
from gausscse.model.gaussian import stored_map
from gausscse.search import GaussianIndex, SentenceIndex
from gausscse.search.backends.milvus_backend import MilvusStore
from gausscse.search.backends.qdrant_backend import QdrantStore

from ..helpers import assert_top_k, reference_search_score
from .test_search import (
    CORPUS,
    broad_and_narrow_gaussians,
    built_twice_in_one_database,
    check_against_brute_force,
    gaussians,
)
from .test_search import tiny_model_folder as tiny_model_folder  # the fixture, used by name

ENGINES = ("qdrant", "milvus")
KIND = {"qdrant": "Qdrant collection", "milvus": "Milvus collection"}


@pytest.fixture(scope="module")
def databases(tmp_path_factory) -> dict[str, str]:
    """The module's database of each engine: a Qdrant folder, a Milvus Lite file."""
    root = tmp_path_factory.mktemp("databases")
    return {"qdrant": str(root / "qdrant"), "milvus": str(root / "gaussians.db")}


@pytest.fixture
def new_uri(databases):
    """``new_uri(engine, memory=False)``: the uri of a new collection in the module's database of ``engine`` (Qdrant
    with ``memory``: in its in-memory store, whose writes are much faster than the embedded folder's SQLite)."""

    def make(engine: str, memory: bool = False) -> str:
        place = ":memory:" if memory else databases[engine]
        return f"{place}#c{uuid.uuid4().hex[:12]}"

    return make


def random_gaussians(count: int, seed: int, dim: int = 384) -> GaussianEmbeddings:
    """Means in tanh range, log σ² around −1 with spread 1 (the model's range)."""
    generator = torch.Generator().manual_seed(seed)
    mu = torch.tanh(torch.randn(count, dim, generator=generator))
    return GaussianEmbeddings(mu, (torch.randn(count, dim, generator=generator) - 1.0).clamp(-10, 10))


def assert_same_as(index: GaussianIndex, exact: GaussianIndex, queries: GaussianEmbeddings, k: int) -> None:
    """``index`` returns what the ``torch`` index ``exact`` returns, in both directions: the same ids, the same
    scores (both exact, in float64 rounded once)."""
    for direction in ("entailing", "entailed_by"):
        scores, ids = getattr(index, direction)(queries, k)
        expected_scores, expected_ids = getattr(exact, direction)(queries, k)
        assert torch.equal(ids, expected_ids), direction
        torch.testing.assert_close(scores, expected_scores, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("engine", "kl_weight"), [("qdrant", 0.0), ("milvus", 2.0)])  # small cases: each λ, engine
def test_exact_top_k_is_the_torch_backends_on_10000_gaussians_after_adds_and_reopening(engine, kl_weight, new_uri):
    items, queries = random_gaussians(10_000, seed=1), random_gaussians(12, seed=2)
    exact = GaussianIndex(384, "mean_kl", kl_weight=kl_weight)
    exact.add(items)
    uri = new_uri(engine, memory=engine == "qdrant")
    index = GaussianIndex(384, "mean_kl", engine, uri=uri, kl_weight=kl_weight)
    index.add(items[:6000])
    index.add(items[6000:])
    assert_same_as(index, exact, queries, 10)
    reopened = GaussianIndex.open(engine, uri)
    assert (reopened.backend, reopened.kl_weight, len(reopened)) == (engine, kl_weight, 10_000)
    torch.testing.assert_close(reopened.embeddings.logvar, items.logvar, rtol=0, atol=0)
    assert_same_as(reopened, exact, queries, 10)


@pytest.mark.parametrize("approximate", [False, True])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_small_index_against_torch_distributions_and_reopened_by_uri_and_folder(
    engine, approximate, new_uri, tmp_path
):
    """Several adds (sentences stored), the brute-force top k of torch.distributions in both directions, the search
    score against scikit-learn's cosine and torch.distributions' KL; reopened by ``GaussianIndex.load(uri)`` and
    through a saved folder that names it, it answers the same and goes on adding to the same collection."""
    backend = f"{engine}-hnsw" if approximate else engine
    items, queries = gaussians(300, seed=11, dim=16), gaussians(6, seed=12, dim=16)
    uri = new_uri(engine)
    index = GaussianIndex(16, "sum", backend, uri=uri)
    index.add(items[:200], [f"sentence {number}" for number in range(200)])
    index.add(items[200:280])
    for k in (1, 10, 280):
        check_against_brute_force(index, queries, items[:280], k)
    assert index.engine.table.ann_covers(280) == approximate  # the engine's ANN collections answered
    index.save(tmp_path / "saved")
    for reopened in (GaussianIndex.load(uri), GaussianIndex.load(tmp_path / "saved")):
        assert (reopened.backend, reopened.reduction, len(reopened)) == (backend, "sum", 280)
        check_against_brute_force(reopened, queries, items[:280], 10)
    GaussianIndex.load(uri).add(items[280:])  # ids continue in the same collection
    check_against_brute_force(GaussianIndex.load(uri), queries, items, 10)
    _, sentences = GaussianIndex.load(uri).engine.table.read()
    assert sentences == [f"sentence {number}" for number in range(200)] + [None] * 100
    scored = GaussianIndex(16, "mean_kl", backend, uri=new_uri(engine, memory=engine == "qdrant"), kl_weight=0.5)
    scored.add(items)
    for direction in ("entailing", "entailed_by"):
        scores, ids = getattr(scored, direction)(queries, 10)
        assert_top_k(ids, scores, reference_search_score(queries, items, 0.5, direction), rtol=1e-5)


@pytest.mark.parametrize("engine", [*ENGINES, "lancedb"])
def test_open_searches_as_the_backend_it_is_given_and_load_as_built(engine, new_uri, tmp_path):
    """``GaussianIndex.open(backend, uri)`` honours the exact/approximate choice whichever backend built the table;
    ``GaussianIndex.load(uri)`` reopens it as it was built."""
    flat, approximate = (engine, "lancedb-ann") if engine == "lancedb" else (engine, f"{engine}-hnsw")
    uri = str(tmp_path / "lance") if engine == "lancedb" else new_uri(engine)
    items, queries = gaussians(120, seed=21, dim=16), gaussians(4, seed=22, dim=16)
    GaussianIndex(16, "sum", approximate, uri=uri).add(items)
    assert GaussianIndex.load(uri).backend == approximate
    exact = GaussianIndex.open(flat, uri)
    assert exact.backend == flat and not exact.engine.approximate
    check_against_brute_force(exact, queries, items, 10)
    assert GaussianIndex.open(approximate, uri).backend == approximate


@pytest.mark.parametrize("engine", ENGINES)
def test_approximate_recall_at_10_through_the_engines_graph_on_lifted_vectors(engine, new_uri):
    """HNSW under the raw inner product on the lifted maps (all of one norm), re-scored: recall@10 ≥ 0.95 in both
    directions; the graph's collections hold every row but the kept-out ones."""
    items, queries = broad_and_narrow_gaussians(3000, seed=12), broad_and_narrow_gaussians(40, seed=13)
    exact = GaussianIndex(64, "sum")
    approximate = GaussianIndex(64, "sum", f"{engine}-hnsw", uri=new_uri(engine, memory=engine == "qdrant"))
    for index in (exact, approximate):
        index.add(items)
    for direction in ("entailing", "entailed_by"):
        _, expected = getattr(exact, direction)(queries, 10)
        scores, found = getattr(approximate, direction)(queries, 10)
        recall = sum(len(set(a) & set(b)) for a, b in zip(expected.tolist(), found.tolist(), strict=True)) / 400
        assert recall >= 0.95, (direction, recall)
        assert (scores[:, :-1] >= scores[:, 1:]).all()  # re-scored: exact similarities, best first
        ann = approximate.engine.table.ann_tables()[direction]
        assert ann.rows == 3000 and ann.table.endswith(f"_ann_{direction}")
    client = approximate.engine.table.client
    if engine == "milvus":
        described = client.describe_index(ann.table, "vector")
        assert (described["index_type"], described["metric_type"]) == ("HNSW", "IP")
    else:
        assert client.get_collection(ann.table).config.params.vectors.distance.name == "DOT"


@pytest.mark.parametrize("engine", ENGINES)
def test_the_database_holds_the_raw_maps_under_a_raw_inner_product(engine, new_uri):
    """The collection itself, read with the engine's client: each row's vectors are the raw ``stored_map`` B(x) and
    A(x) (never normalised), under ``DOT`` / ``IP``."""
    items = gaussians(20, seed=13, dim=8)
    uri = new_uri(engine)
    GaussianIndex(8, "sum", engine, uri=uri).add(items)
    place, name = uri.split("#")
    expected = {direction: stored_map(items.mu, items.logvar, direction) for direction in ("entailing", "entailed_by")}
    if engine == "qdrant":
        points = QdrantStore.connect(place).retrieve(name, ids=list(range(20)), with_vectors=True)
        vectors = {direction: [point.vector[direction] for point in points] for direction in expected}
        metric = {
            params.distance.name
            for params in QdrantStore.connect(place).get_collection(name).config.params.vectors.values()
        }
        assert metric == {"DOT"}
    else:
        rows = MilvusStore.connect(place).query(
            name, filter="id >= 0", output_fields=["id", *(f"{d}_vector" for d in expected)]
        )
        rows = sorted(rows, key=lambda row: row["id"])
        vectors = {direction: [row[f"{direction}_vector"] for row in rows] for direction in expected}
        assert MilvusStore.connect(place).describe_index(name, "entailing_vector")["metric_type"] == "IP"
    for direction, maps in expected.items():
        torch.testing.assert_close(torch.tensor(vectors[direction], dtype=torch.float64), maps, rtol=1e-6, atol=1e-6)
    assert float(expected["entailing"].norm(dim=1).std()) > 0.1  # the rows' norms differ: a unit copy would rank apart


@pytest.mark.parametrize("engine", ENGINES)
def test_an_existing_collection_is_never_overwritten(engine, new_uri):
    items = gaussians(5, seed=15)
    uri = new_uri(engine)
    GaussianIndex(12, "sum", engine, uri=uri).add(items)
    with pytest.raises(
        FileExistsError, match=rf"'c\w+': reopen a GaussianIndex there .*open\('{engine}', '.+'\), remove it"
    ):
        GaussianIndex(12, "sum", f"{engine}-hnsw", uri=uri)
    assert len(GaussianIndex.load(uri)) == 5  # the refused constructor changed nothing
    foreign, (place, name) = new_uri(engine), new_uri(engine).split("#")
    if engine == "qdrant":  # someone's own collection, without GaussianIndex settings
        from qdrant_client import models

        QdrantStore.connect(place).create_collection(name, vectors_config=models.VectorParams(size=4, distance="Dot"))
    else:
        MilvusStore.connect(place).create_collection(name, dimension=4)
    with pytest.raises(FileExistsError, match=rf"already holds a collection '{name}'"):
        GaussianIndex(12, "sum", engine, uri=f"{place}#{name}")
    with pytest.raises(ValueError, match=rf"{KIND[engine]} '{name}' has no GaussianIndex settings"):
        GaussianIndex.open(engine, f"{place}#{name}")
    with pytest.raises(FileNotFoundError, match=r"holds no GaussianIndex collection"):
        GaussianIndex.open(engine, foreign)
    with pytest.raises(ValueError, match=r"sentences must be a list of 5 strings"):
        GaussianIndex.load(uri).add(items, ["only one"])


def drop(engine: str, uri: str) -> None:
    """Delete the collection of ``uri`` with the engine's own client."""
    place, name = uri.split("#")
    if engine == "qdrant":
        QdrantStore.connect(place).delete_collection(name)
    else:
        MilvusStore.connect(place).drop_collection(name)


def ann_metadata(engine: str, uri: str, direction: str) -> dict:
    name = uri.split("#")[1]
    return GaussianIndex.open(f"{engine}-hnsw", uri).engine.table.ann_metadata(f"{name}_ann_{direction}")


@pytest.mark.parametrize("engine", ENGINES)
def test_an_ann_collection_left_by_another_index_or_cut_short_is_built_again(engine, new_uri):
    """The ANN collections record their parent's table id and how many vectors they hold: a new index at the name of a
    deleted one does not search the old graph, and an ANN collection that lost vectors (a build killed between two
    requests) is built again at the next approximate search, which then answers as the brute force."""
    uri, backend = new_uri(engine), f"{engine}-hnsw"
    old, new, queries = gaussians(200, seed=31, dim=16), gaussians(200, seed=32, dim=16), gaussians(5, seed=33, dim=16)
    first = GaussianIndex(16, "sum", backend, uri=uri)
    first.add(old)
    first.entailing(queries, 5)  # builds the ANN collections
    drop(engine, uri)  # the index, not its ANN collections
    second = GaussianIndex(16, "sum", backend, uri=uri)
    second.add(new)
    check_against_brute_force(second, queries, new, 10)
    table_id = second.engine.table.table_id
    assert {ann_metadata(engine, uri, d)["table_id"] for d in ("entailing", "entailed_by")} == {table_id}
    place, name = uri.split("#")
    ann = f"{name}_ann_entailing"
    if engine == "qdrant":  # the build cut short: vectors missing from the ANN collection
        from qdrant_client import models

        QdrantStore.connect(place).delete(ann, points_selector=models.FilterSelector(filter=models.Filter()))
    else:
        MilvusStore.connect(place).delete(ann, filter="id >= 100")
    assert GaussianIndex.open(backend, uri).engine.table.row_count(ann) < 200
    check_against_brute_force(GaussianIndex.open(backend, uri), queries, new, 10)
    reopened = GaussianIndex.open(backend, uri).engine.table
    assert reopened.row_count(ann) == ann_metadata(engine, uri, "entailing")["vectors"] > 100


@pytest.mark.parametrize("engine", ENGINES)
def test_a_collection_at_an_ann_name_is_refused_and_never_taken_for_one(engine, new_uri):
    uri = new_uri(engine)
    with pytest.raises(ValueError, match=r"is the name of the ANN collection of an index named 'c\w+': choose another"):
        GaussianIndex(16, "sum", engine, uri=f"{uri}_ann_entailing")
    place, name = uri.split("#")
    if engine == "qdrant":  # someone's own collection where the ANN collection would go
        from qdrant_client import models

        QdrantStore.connect(place).create_collection(
            f"{name}_ann_entailing", vectors_config=models.VectorParams(size=4, distance="Dot")
        )
    else:
        MilvusStore.connect(place).create_collection(f"{name}_ann_entailing", dimension=4)
    index = GaussianIndex(16, "sum", f"{engine}-hnsw", uri=uri)
    index.add(gaussians(50, seed=34, dim=16))
    with pytest.raises(ValueError, match=rf"'{name}_ann_entailing', where this index keeps its ANN index, is another"):
        index.entailing(gaussians(2, seed=35, dim=16), 3)
    assert GaussianIndex.open(engine, uri).entailing(gaussians(2, seed=35, dim=16), 3)[1].shape == (2, 3)


@pytest.mark.parametrize("engine", ENGINES)
def test_an_add_killed_between_its_requests_is_never_served_and_is_rolled_back(engine, tmp_path):
    """A writer killed after the first of its add's requests (Qdrant 512 points, Milvus 2,048 rows a request; 64 here):
    a reopened index serves the rows of the adds that finished, and the next add replaces the partial batch."""
    uri = str(tmp_path / ("qdrant" if engine == "qdrant" else "gaussians.db")) + "#docs"
    module, requests, method = {
        "qdrant": ("qdrant_backend", "POINTS_PER_REQUEST", "upsert"),
        "milvus": ("milvus_backend", "ROWS_PER_REQUEST", "insert"),
    }[engine]
    writer = f"""
import os, torch
from gausscse import GaussianEmbeddings
from gausscse.search import GaussianIndex
from gausscse.search.backends import {module}
{module}.{requests} = 64
generator = torch.Generator().manual_seed(7)
def gaussians(count):
    return GaussianEmbeddings(torch.randn(count, 16, generator=generator), torch.randn(count, 16, generator=generator))
index = GaussianIndex(16, "sum", "{engine}", uri={uri!r})
index.add(gaussians(10))
client, calls = index.engine.table.client, []
original = getattr(client, "{method}")
def dying(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2:
        os._exit(3)  # killed after the first request of this add
    return original(*args, **kwargs)
setattr(client, "{method}", dying)
index.add(gaussians(1000))
"""
    done = subprocess.run([sys.executable, "-c", writer], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-3000:]
    generator = torch.Generator().manual_seed(7)
    first = GaussianEmbeddings(torch.randn(10, 16, generator=generator), torch.randn(10, 16, generator=generator))
    reopened = GaussianIndex.open(engine, uri)
    assert len(reopened) == 10 and reopened.engine.table.row_count(reopened.engine.table.name) == 74
    queries, more = gaussians(3, seed=41, dim=16), gaussians(5, seed=42, dim=16)
    check_against_brute_force(reopened, queries, first, 10)  # the 64 rows written past them are not served
    reopened.add(more)
    both = GaussianEmbeddings(torch.cat([first.mu, more.mu]), torch.cat([first.logvar, more.logvar]))
    again = GaussianIndex.load(uri)
    assert len(again) == 15 and again.engine.table.row_count(again.engine.table.name) == 15  # rolled back
    check_against_brute_force(again, queries, both, 15)


def in_new_process(code: str, cwd) -> str:
    """Run ``code`` in a new interpreter (this project importable), return stdout."""
    done = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def test_milvus_refuses_a_folder_and_reopens_in_a_fresh_process(tmp_path):
    """A folder named like a Milvus Lite file (a user's, another engine's database) is refused, not written into;
    an index built by one process is reopened and searched by another (the README's build, then query)."""
    folder = tmp_path / "mine.db"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"mine.db holds keep.txt: a Milvus Lite database needs a new name"):
        GaussianIndex(16, "sum", "milvus", uri=str(folder))
    assert [path.name for path in folder.iterdir()] == ["keep.txt"]
    qdrant = tmp_path / "qdrant.db"
    GaussianIndex(16, "sum", "qdrant", uri=str(qdrant)).add(gaussians(3, seed=1, dim=16))
    with pytest.raises(FileExistsError, match=r"qdrant.db holds .*: a Milvus Lite database needs a new name"):
        GaussianIndex(16, "sum", "milvus", uri=f"{qdrant}#other")
    uri = str(tmp_path / "fresh.db")
    build = f"""
import torch
from gausscse import GaussianEmbeddings
from gausscse.search import GaussianIndex
generator = torch.Generator().manual_seed(5)
index = GaussianIndex(16, "sum", "milvus-hnsw", uri={uri!r})
index.add(GaussianEmbeddings(torch.randn(60, 16, generator=generator), torch.randn(60, 16, generator=generator)))
index.entailing(GaussianEmbeddings(torch.randn(2, 16), torch.zeros(2, 16)), 3)
print("built")
"""
    query = f"""
import torch
from gausscse import GaussianEmbeddings
from gausscse.search import GaussianIndex
for backend in ("milvus", "milvus-hnsw"):
    index = GaussianIndex.open(backend, {uri!r})
    scores, ids = index.entailing(GaussianEmbeddings(torch.randn(2, 16), torch.zeros(2, 16)), 3)
    print(backend, len(index), ids.shape[1])
print(len(GaussianIndex.load({uri!r})))
"""
    assert "built" in in_new_process(build, tmp_path)
    assert in_new_process(query, tmp_path).split() == ["milvus", "60", "3", "milvus-hnsw", "60", "3", "60"]


@pytest.mark.parametrize("engine", ENGINES)
def test_wrong_settings_and_a_replaced_collection_are_refused(engine, new_uri, tmp_path):
    """A saved folder whose settings rank otherwise than its collection, a collection whose settings do not fit its
    vectors, and a collection deleted and built again for another corpus (same size): each named in one line, on
    load and on the next search of an open handle."""
    uri = new_uri(engine)
    built = built_twice_in_one_database(engine, uri, lambda: drop(engine, uri), tmp_path)
    with pytest.raises(ValueError, match=rf"was built on the {KIND[engine]} \w+ at .*, which now holds another one"):
        SentenceIndex.load(tmp_path / "A")
    with pytest.raises(ValueError, match=rf"now holds another GaussianIndex table \({KIND[engine]} \w+, this"):
        built["A"].entailing(gaussians(1, seed=82), 3)
    settings = json.loads((tmp_path / "B" / "index_config.json").read_text())
    (tmp_path / "B" / "index_config.json").write_text(json.dumps({**settings, "kl_weight": 0.3}))
    (tmp_path / "B" / "manifest.json").unlink()
    write_manifest(tmp_path / "B")
    with pytest.raises(ValueError, match=r"index_config\.json says kl_weight=0\.3, the .* kl_weight=None"):
        SentenceIndex.load(tmp_path / "B")
    drop(engine, uri)
    with pytest.raises(ValueError, match=rf"the {KIND[engine]} 'c\w+' cannot be read any more"):
        built["B"].entailed_by(gaussians(1, seed=83), 3)
    with pytest.raises(FileNotFoundError, match=r"names the database .*, which is gone \(.+\)"):
        SentenceIndex.load(tmp_path / "A")
    mismatched = new_uri(engine)
    GaussianIndex(12, "sum", engine, uri=mismatched, kl_weight=0.5)  # vectors of 3d + 2 = 38 values
    table = GaussianIndex.open(engine, mismatched).engine.table
    stored = {**table.stored_settings()}
    stored.pop("kl_weight")  # settings that need 2d + 2 = 26
    place, name = mismatched.split("#")
    if engine == "qdrant":
        QdrantStore.connect(place).update_collection(name, metadata={"gausscse": stored})
    else:
        MilvusStore.connect(place).alter_collection_properties(name, properties={"gausscse": json.dumps(stored)})
    with pytest.raises(ValueError, match=r"settings \(d = 12, kl_weight = None\) need .*26"):
        GaussianIndex.open(engine, mismatched)


@pytest.mark.parametrize("engine", ENGINES)
def test_cli_builds_and_queries_an_index_in_each_database(engine, tiny_model_folder, tmp_path):
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build = ["build", "--model", str(tiny_model_folder), "--corpus", str(corpus_path), "--index", str(tmp_path / "ix")]
    search_main([*build, "--backend", engine])
    default = {"qdrant": "ix.qdrant", "milvus": "ix.milvus.db"}[engine]
    assert json.loads((tmp_path / "ix" / "index_config.json").read_text())["uri"] == str(tmp_path / default)
    from gausscse import GaussCSEModel

    model = GaussCSEModel.from_pretrained(tiny_model_folder).eval()
    distinct = [sentence for sentence in dict.fromkeys(CORPUS) if sentence]
    claims = ["Someone makes music.", "Animals are outside."]
    for flag, scores in (
        ("--entailing", model.similarity(claims, distinct)),
        ("--entailed_by", model.similarity(distinct, claims).T),
    ):
        hits = search_main(["query", "--index", str(tmp_path / "ix"), flag, *claims, "-k", "3"])
        ids = [[hit["id"] for hit in row] for row in hits]
        assert [[hit["sentence"] for hit in row] for row in hits] == [[distinct[i] for i in row] for row in ids]
        assert_top_k(ids, [[hit["score"] for hit in row] for row in hits], scores, rtol=1e-4)
    with pytest.raises(ValueError, match=rf"--uri .*{default}.* already holds a collection 'gaussians'"):
        search_main([*build, "--backend", engine])
    with pytest.raises(ValueError, match=r"--uri :memory: does not outlive the command"):
        search_main([*build, "--backend", engine, "--uri", ":memory:"])
    with pytest.raises(ValueError, match=rf"--uri is not for --backend torch: .*backend '{engine}' or '{engine}-hnsw'"):
        search_main([*build, "--uri", str(tmp_path / "other")])
