"""Entailment search: every backend's top-k against a brute force from torch.distributions (both directions, ties,
k = 1 and k = len), several adds, save/load with FAISS files, named errors, the corpus index and the CLI."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from gausscse import GaussianEmbeddings
from gausscse.cli.search import main as search_main
from gausscse.cli.search import read_corpus
from gausscse.cli.search import run as search_run
from gausscse.model.gaussian import similarity_matrix
from gausscse.search import GaussianIndex, SentenceIndex
from gausscse.search import index as index_module
from gausscse.search.backends import faiss_backend

from ..helpers import assert_top_k, reference_search_score, reference_similarity


def gaussians(count: int, seed: int, dim: int = 12) -> GaussianEmbeddings:
    """Means in tanh range, log σ² around −1 with spread 1.5 (clamped to the model's ±10)."""
    generator = torch.Generator().manual_seed(seed)
    mu = torch.tanh(torch.randn(count, dim, generator=generator))
    logvar = (1.5 * torch.randn(count, dim, generator=generator) - 1.0).clamp(-10, 10)
    return GaussianEmbeddings(mu, logvar)


def built_twice_in_one_database(backend: str, uri, drop, folder: Path) -> dict[str, GaussianIndex]:
    """Index A (10 Gaussians and sentences) in the database at ``uri``, then ``drop()`` and index B of the same size
    built there; each saved as a ``SentenceIndex`` folder ``folder / name``. Returns the two open indexes."""
    built = {}
    for name, seed in (("A", 80), ("B", 81)):
        if built:
            drop()
        index = GaussianIndex(12, "sum", backend, uri=uri)
        sentences = [f"{name}{row}" for row in range(10)]
        index.add(gaussians(10, seed=seed), sentences)
        SentenceIndex(index, sentences, name).save(folder / name)
        built[name] = index
    assert SentenceIndex.load(folder / "B").sentences_of([0]) == ["B0"]  # read from the database
    return built


def brute_force(queries: GaussianEmbeddings, items: GaussianEmbeddings, reduction: str, direction: str):
    """Every (query, item) similarity from torch.distributions in float64, each row sorted by hand: descending
    score, ties by ascending id."""
    if direction == "entailing":  # sim(q‖x)
        scores = reference_similarity(queries.mu, queries.logvar, items.mu, items.logvar, reduction)
    else:  # sim(x‖q)
        scores = reference_similarity(items.mu, items.logvar, queries.mu, queries.logvar, reduction).T
    rows = scores.tolist()
    return [sorted(range(len(items)), key=lambda item, row=row: (-row[item], item)) for row in rows], scores


def check_against_brute_force(index, queries, items, k, directions=("entailing", "entailed_by")):
    for direction in directions:
        scores, ids = getattr(index, direction)(queries, k)
        expected, reference = brute_force(queries, items, index.reduction, direction)
        assert scores.shape == ids.shape == (queries.mu.shape[0], k)
        assert ids.tolist() == [row[:k] for row in expected], direction
        torch.testing.assert_close(scores.double(), reference.gather(1, ids), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("reduction", ["sum", "mean_kl", "mean_dim"])
@pytest.mark.parametrize("k", [1, 5, 23])
def test_torch_backend_equals_brute_force_in_both_directions(reduction, k, monkeypatch, tmp_path):
    monkeypatch.setattr(index_module, "CHUNK_ROWS", 4)  # several chunks, merged across
    items, queries = gaussians(23, seed=1), gaussians(3, seed=2)
    index = GaussianIndex(12, reduction)
    index.add(items[:10])
    index.add(items[10:])  # several adds: ids continue
    index.save(tmp_path / "index")
    for candidate in (index, GaussianIndex.load(tmp_path / "index")):
        assert len(candidate) == 23
        check_against_brute_force(candidate, queries, items, k)


@pytest.mark.parametrize("reduction", ["sum", "mean_kl"])
@pytest.mark.parametrize("k", [1, 5, 40])
def test_faiss_backend_is_exact_for_the_kl_reductions_with_realistic_ranges(k, reduction, monkeypatch):
    """float32 inner products of the feature maps, the default shortlist (2·k), exact re-scoring: the brute-force
    top k of the model's own similarity."""
    monkeypatch.setattr(index_module, "QUERY_CHUNK", 3)  # re-scoring in several query chunks
    items, queries = gaussians(40, seed=3, dim=16), gaussians(7, seed=4, dim=16)
    index = GaussianIndex(16, reduction, "faiss")
    assert index.candidates_per_result == 2
    index.add(items)
    check_against_brute_force(index, queries, items, k)


def test_faiss_mean_dim_reranks_the_sum_shortlist_exactly():
    """mean_dim through FAISS: candidates by the sum form, re-ranked by mean_dim; a shortlist covering the whole
    index gives exactly the brute-force mean_dim ranking."""
    items, queries = gaussians(30, seed=5), gaussians(4, seed=6)
    index = GaussianIndex(12, "mean_dim", "faiss", candidates_per_result=30)
    index.add(items)
    check_against_brute_force(index, queries, items, k=1)


@pytest.mark.parametrize("backend", ["torch", "faiss"])
def test_ties_come_in_id_order(backend, monkeypatch):
    monkeypatch.setattr(index_module, "CHUNK_ROWS", 3)
    base = gaussians(6, seed=7)
    twin = base[2]
    items = GaussianEmbeddings(
        torch.cat([base.mu, twin.mu[None], twin.mu[None]]), torch.cat([base.logvar] * 1 + [twin.logvar[None]] * 2)
    )
    index = GaussianIndex(12, "sum", backend, candidates_per_result=8)
    index.add(items)
    for direction in ("entailing", "entailed_by"):
        _, ids = getattr(index, direction)(twin, 8)
        first = ids[0, :3].tolist()
        assert first == [2, 6, 7], (direction, ids)  # sim(twin‖twin) = 1 three times, lowest id first


@pytest.mark.parametrize("backend", ["faiss", "faiss-hnsw"])
def test_faiss_indexes_grow_with_later_adds_and_round_trip(backend, tmp_path):
    """A shortlist as long as the index makes every FAISS backend exact, so any id lost on the way shows."""
    items, queries = gaussians(50, seed=8), gaussians(5, seed=9)
    index = GaussianIndex(12, "sum", backend, candidates_per_result=50)
    index.add(items[:30])
    index.entailing(queries, 3)  # builds the 'entailing' FAISS index from 30 items
    index.add(items[30:])  # reaches the built index (added, or rebuilt when outside its transform)
    check_against_brute_force(index, queries, items, k=5)
    assert {name: built.size for name, built in index.engine.directions.items()} == {"entailing": 50, "entailed_by": 50}
    index.save(tmp_path / "index")
    transforms = [] if backend == "faiss" else ["entailed_by.transform.safetensors", "entailing.transform.safetensors"]
    assert sorted(path.name for path in (tmp_path / "index").iterdir()) == sorted(
        [
            "entailed_by.faiss",
            "entailing.faiss",
            "gaussians.safetensors",
            "index_config.json",
            "manifest.json",
            *transforms,
        ]
    )
    loaded = GaussianIndex.load(tmp_path / "index")
    assert {name: built.size for name, built in loaded.engine.directions.items()} == {
        "entailing": 50,
        "entailed_by": 50,
    }
    check_against_brute_force(loaded, queries, items, k=5)


def test_an_approximate_index_is_extended_in_place_or_rebuilt_when_items_fall_outside_it(monkeypatch):
    monkeypatch.setattr(faiss_backend, "MAX_OUTLIERS", 2)
    items = gaussians(40, seed=10)
    index = GaussianIndex(12, "sum", "faiss-hnsw", candidates_per_result=41)
    index.add(items)
    built = index.engine.direction("entailing")
    assert len(built.transform["outliers"]) == 0
    index.add(items[:1])  # a copy of a stored item fits the transform: added to the graph
    assert index.engine.direction("entailing") is built and built.faiss_index.ntotal == 41
    narrow = GaussianEmbeddings(items.mu[:2], torch.full((2, 12), -9.0))  # 1/σ² = e^9: far outside
    index.add(narrow)  # kept beside the graph, scored exactly for every query
    assert index.engine.direction("entailing") is built and built.transform["outliers"].tolist() == [41, 42]
    index.add(narrow[:1])  # a third one is more than MAX_OUTLIERS: rebuilt
    rebuilt = index.engine.direction("entailing")
    assert rebuilt is not built and rebuilt.size == 44
    all_items = GaussianEmbeddings(
        torch.cat([items.mu, items.mu[:1], narrow.mu, narrow.mu[:1]]),
        torch.cat([items.logvar, items.logvar[:1], narrow.logvar, narrow.logvar[:1]]),
    )
    check_against_brute_force(index, gaussians(3, seed=11), all_items, k=4, directions=("entailing",))


def low_rank_gaussians(count: int, seed: int, dim: int = 64, rank: int = 8) -> GaussianEmbeddings:
    """Gaussians driven by a few latent factors (sentence embeddings have low intrinsic dimension), with
    per-item noise; the latent-to-dimension maps are shared by every call."""
    generator = torch.Generator().manual_seed(seed)
    factors = torch.Generator().manual_seed(1234)
    to_mu, to_logvar = torch.randn(rank, dim, generator=factors), torch.randn(rank, dim, generator=factors)
    latent = torch.randn(count, rank, generator=generator)
    mu = torch.tanh(0.5 * latent @ to_mu + 0.1 * torch.randn(count, dim, generator=generator))
    logvar = -2.0 + 0.3 * latent @ to_logvar + 0.3 * torch.randn(count, dim, generator=generator)
    return GaussianEmbeddings(mu, logvar.clamp(-10, 10))


@pytest.mark.parametrize("direction", ["entailing", "entailed_by"])
def test_approximate_recall_at_10_on_a_fixed_seed(direction):
    items, queries = low_rank_gaussians(3000, seed=12), low_rank_gaussians(50, seed=13)
    exact = GaussianIndex(64, "sum")
    approximate = GaussianIndex(64, "sum", "faiss-hnsw", ef_search=32)
    for index in (exact, approximate):
        index.add(items)
    _, expected = getattr(exact, direction)(queries, 10)
    scores, found = getattr(approximate, direction)(queries, 10)
    recall = (
        sum(len(set(a) & set(b)) for a, b in zip(expected.tolist(), found.tolist(), strict=True)) / expected.numel()
    )
    # HNSW is approximate and its graph depends on float32 rounding (FAISS picks AVX2 or AVX512 code) and on the
    # order threads insert items: 0.9 leaves room for that and still tells a working graph from a broken transform
    assert recall >= 0.9, recall
    # whatever it found is scored exactly
    _, reference = brute_force(queries, items, "sum", direction)
    torch.testing.assert_close(scores.double(), reference.gather(1, found), rtol=1e-4, atol=1e-6)


def test_bad_input_is_named(tmp_path):
    index = GaussianIndex(12, "sum")
    with pytest.raises(ValueError, match="the index is empty"):
        index.entailing(gaussians(1, seed=3), 1)
    index.add(gaussians(4, seed=4))
    with pytest.raises(ValueError, match=r"k must be between 1 and len\(index\) = 4, got 5"):
        index.entailing(gaussians(1, seed=3), 5)
    with pytest.raises(ValueError, match=r"k must be between 1 and len\(index\) = 4, got 0"):
        index.entailed_by(gaussians(1, seed=3), 0)
    with pytest.raises(ValueError, match="queries have dimension 8, the index 12"):
        index.entailed_by(gaussians(1, seed=3, dim=8), 1)
    with pytest.raises(TypeError, match="queries must be GaussianEmbeddings"):
        index.entailing(torch.zeros(1, 12), 1)
    bad = gaussians(2, seed=5)
    bad.mu[1, 0] = float("nan")
    with pytest.raises(ValueError, match=r"embeddings.mu\[1\] holds NaN"):
        index.add(bad)
    with pytest.raises(ValueError, match="similarity_reduction must be one of"):
        GaussianIndex(12, "max")
    with pytest.raises(ValueError, match="backend must be one of"):
        GaussianIndex(12, "sum", "annoy")
    with pytest.raises(ValueError, match="ef_search must be a positive integer, got 0"):
        GaussianIndex(12, "sum", "faiss-hnsw", ef_search=0)
    with pytest.raises(ValueError, match="runs on the CPU"):
        GaussianIndex(12, "sum", "faiss", device="cuda")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="refusing to replace it"):
        index.save(tmp_path / "notes")
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"
    with pytest.raises(FileNotFoundError, match="not a saved GaussianIndex"):
        GaussianIndex.load(tmp_path / "notes")


@pytest.fixture
def tiny_model_folder(tmp_path, make_tiny_model, minilm_tokenizer):
    folder = tmp_path / "model"
    make_tiny_model(similarity_reduction="sum", initializer_range=0.2).save_pretrained(folder)  # ranks: no near-ties
    minilm_tokenizer.save_pretrained(folder)
    return folder


CORPUS = [
    "A man is playing a red guitar on a stage.",
    "Two dogs run through a snowy field.",
    "",
    "A woman cooks pasta in a small kitchen.",
    "Two dogs run through a snowy field.",  # a repeat: indexed once
    "Children are swimming in a lake.",
    "A chef is cooking.",
]


def test_cli_build_and_query_end_to_end(tiny_model_folder, tmp_path):
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    search_main(
        ["build", "--model", str(tiny_model_folder), "--corpus", str(corpus_path), "--index", str(tmp_path / "ix")]
    )
    corpus = SentenceIndex.load(tmp_path / "ix")
    distinct = [sentence for sentence in dict.fromkeys(CORPUS) if sentence]
    assert corpus.sentences == distinct and corpus.model_name == str(tiny_model_folder)

    from gausscse import GaussCSEModel

    model = GaussCSEModel.from_pretrained(tiny_model_folder).eval()
    claims = ["Someone is making music.", "Animals are outside."]
    expected = {
        "--entailing": model.similarity(claims, distinct),  # sim(claim‖sentence)
        "--entailed_by": model.similarity(distinct, claims).T,  # sim(sentence‖claim)
    }
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for flag, scores in expected.items():
        command = [sys.executable, "-m", "gausscse.cli.search", "query", "--index", str(tmp_path / "ix"), flag, *claims]
        done = subprocess.run([*command, "-k", "3", "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        hits = json.loads(done.stdout)
        ids = torch.tensor([[hit["id"] for hit in row] for row in hits])
        sentences = [[hit["sentence"] for hit in row] for row in hits]
        assert sentences == [[distinct[item] for item in row] for row in ids.tolist()]
        # the index holds Gaussians encoded in the CLI's batches, the reference its own: float32 forward passes of
        # other batch shapes, equal to ~1e-6 relative on any CPU; 1e-4 leaves room, and the tiny model's scores are
        # ~1e-2 apart, so the order is still checked
        assert_top_k(ids, [[hit["score"] for hit in row] for row in hits], scores, rtol=1e-4)


def test_a_model_that_states_a_search_score_is_indexed_by_it_unless_told(tiny_model_folder, tmp_path):
    """``--score auto`` (the default) indexes a model that states λ by its search score (the hits' scores are
    cos − λ·KL/d: scikit-learn, torch.distributions), ``--score similarity`` by sim; ``--score search`` on a model
    without λ is one clear error before anything is encoded."""
    from gausscse import GaussCSEModel
    from gausscse.model.configuration_gausscse import GaussCSEConfig

    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build = ["build", "--model", str(tiny_model_folder), "--corpus", str(corpus_path), "--index"]
    with pytest.raises(ValueError, match=r"states search_kl_weight \(training sets it; `python -m gausscse.eval"):
        search_main([*build, str(tmp_path / "none"), "--score", "search"])
    assert not (tmp_path / "none").exists()
    config = GaussCSEConfig.from_pretrained(tiny_model_folder)
    config.search_kl_weight = 2.0
    config.save_pretrained(tiny_model_folder)
    search_main([*build, str(tmp_path / "auto")])
    search_main([*build, str(tmp_path / "sim"), "--score", "similarity"])
    assert SentenceIndex.load(tmp_path / "auto").index.kl_weight == 2.0
    assert SentenceIndex.load(tmp_path / "sim").index.kl_weight is None
    model = GaussCSEModel.from_pretrained(tiny_model_folder).eval()
    distinct = [sentence for sentence in dict.fromkeys(CORPUS) if sentence]
    claims = ["Someone is making music.", "Animals are outside."]
    hits = search_main(["query", "--index", str(tmp_path / "auto"), "--entailing", *claims, "-k", "5"])
    expected = reference_search_score(model.encode(claims), model.encode(distinct), 2.0, "entailing")
    ids = torch.tensor([[hit["id"] for hit in row] for row in hits])
    assert_top_k(ids, [[hit["score"] for hit in row] for row in hits], expected, rtol=1e-4)


def test_cli_errors_name_the_argument(tiny_model_folder, tmp_path):
    table = tmp_path / "corpus.jsonl"
    table.write_text('{"premise": "A dog runs."}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="is a table: name its text column with --column"):
        search_main(
            ["build", "--model", str(tiny_model_folder), "--corpus", str(table), "--index", str(tmp_path / "a")]
        )
    with pytest.raises(ValueError, match="has no column 'text'"):
        search_main(
            ["build", "--model", str(tiny_model_folder), "--corpus", str(table), "--column", "text", "--index", "x"]
        )
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(ValueError, match="holds no sentences"):
        search_main(["build", "--model", str(tiny_model_folder), "--corpus", str(empty), "--index", "x"])
    with pytest.raises(FileNotFoundError, match=r"--corpus .*missing.txt: no such file"):
        search_main(["build", "--model", "m", "--corpus", str(tmp_path / "missing.txt"), "--index", "x"])
    with pytest.raises(ValueError, match=r"--model .*: no config.json in this folder, so no model"):
        search_main(["build", "--model", str(tmp_path), "--corpus", str(table), "--column", "premise", "--index", "x"])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    command = [
        sys.executable,
        "-m",
        "gausscse.cli.search",
        "query",
        "--index",
        str(tmp_path / "nowhere"),
        "--entailing",
        "x",
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 2 and "gausscse-search: error:" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("suffix", [".csv", ".tsv"])
def test_table_corpus_cells_are_sentences_verbatim(tmp_path, suffix):
    cells = ["None", "NA", "null", "nan", "N/A", "2019", '"He said', '"Hi," she said']  # NA words, a number, quotes
    path = tmp_path / f"corpus{suffix}"
    if suffix == ".tsv":
        path.write_text("text\n" + "".join(f"{cell}\n" for cell in cells) + "\n", encoding="utf-8")
    else:
        quoted = [f'"{cell.replace(chr(34), chr(34) * 2)}"' if '"' in cell or "," in cell else cell for cell in cells]
        path.write_text("text\n" + "".join(f"{cell}\n" for cell in quoted), encoding="utf-8")
    assert read_corpus(path, "text") == cells


def test_the_index_classes_are_exported_from_the_package():
    import gausscse
    from gausscse import search

    assert gausscse.GaussianIndex is search.GaussianIndex and gausscse.SentenceIndex is search.SentenceIndex
    assert {"GaussianIndex", "SentenceIndex"} <= set(gausscse.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        gausscse.Nope  # noqa: B018


def test_gaussians_of_another_copy_of_the_class_are_accepted():
    """A model loaded with trust_remote_code in a fresh process runs its folder's own copy of gaussian.py, whose
    GaussianEmbeddings is another class with the same fields (tests/hub/test_model_card.py runs that case for real)."""
    from dataclasses import dataclass

    @dataclass
    class ShippedGaussianEmbeddings:
        mu: torch.Tensor
        logvar: torch.Tensor

    items, queries = gaussians(9, seed=14), gaussians(2, seed=15)
    index = GaussianIndex(12, "sum")
    index.add(ShippedGaussianEmbeddings(items.mu, items.logvar))
    check_against_brute_force(index, ShippedGaussianEmbeddings(queries.mu, queries.logvar), items, k=3)


def extreme_items(count: int = 1001, dim: int = 16) -> GaussianEmbeddings:
    """Ordinary items and, at id 500, μ = 1e8 with log σ² = −10: extreme (μ²/σ² ≈ 2e20) but within the limits."""
    items = gaussians(count, seed=21, dim=dim)
    items.mu[500], items.logvar[500] = 1e8, -10.0
    return items


@pytest.mark.parametrize("backend", ["faiss", "faiss-hnsw"])
@pytest.mark.parametrize("direction", ["entailing", "entailed_by"])
def test_an_extreme_but_valid_item_keeps_every_backend_correct(backend, direction):
    items = extreme_items()
    queries = gaussians(6, seed=22, dim=16)
    queries.logvar[0] = 25.0  # an extreme query too (σ² = e^25)
    queries.mu[1], queries.logvar[1] = items.mu[500], items.logvar[500]  # the extreme item itself
    exact = GaussianIndex(16, "sum", "torch")
    exact.add(items)
    index = GaussianIndex(16, "sum", backend)
    index.add(items)
    scores, ids = getattr(index, direction)(queries, 10)
    assert (ids >= 0).all() and torch.isfinite(scores).all()  # hits for every query, none dropped as −1 / −inf
    expected_scores, expected_ids = getattr(exact, direction)(queries, len(items))
    assert ids[1, 0] == 500 and scores[1, 0] == 1.0  # sim(x‖x) = 1: the extreme item finds itself
    ordinary = [0, 2, 3, 4, 5]  # for the extreme query every other KL is ~1e20: float32 cannot order them
    if backend == "faiss":
        assert ids[ordinary].tolist() == expected_ids[ordinary, :10].tolist()
    else:  # approximate: recall@10 near the one without the extreme item; the graph's float32 rounding and
        # insertion order vary by CPU and threads, and 0.8 leaves room for that
        found = [
            len(set(row.tolist()) & set(best.tolist())) for row, best in zip(ids, expected_ids[:, :10], strict=True)
        ]
        assert sum(found[row] for row in ordinary) / (10 * len(ordinary)) >= 0.8, found
    _, reference = brute_force(queries, items, "sum", direction)  # torch.distributions, float64
    torch.testing.assert_close(scores.double(), reference.gather(1, ids), rtol=1e-4, atol=1e-30)  # re-scored exactly
    if backend == "faiss":  # the exact backend orders all of them, the extreme item last
        all_scores, all_ids = getattr(index, direction)(queries, len(items))
        assert all_ids.tolist() == expected_ids.tolist()
        torch.testing.assert_close(all_scores, expected_scores)


@pytest.mark.parametrize("backend", ["faiss", "faiss-hnsw", "lancedb", "lancedb-ann"])
@pytest.mark.parametrize("reduction", ["sum", "mean_kl"])
def test_every_backend_returns_the_models_own_scores_near_the_clamp(backend, reduction, tmp_path):
    """Items around one Gaussian with log σ² at the model's clamp (−10: KL terms ~10⁴), queries beside some of them:
    every re-scoring backend returns ``similarity_matrix``'s scores (``model.similarity``, the torch backend: the KL
    summed in float64 and rounded once to float32), so they can differ by one float32 step at most, on any CPU. A
    float32 sum of the d KL terms misses by more than a step here (the old re-score failed this test): enough to
    order close candidates differently from the torch backend, and differently on different instruction sets."""
    generator = torch.Generator().manual_seed(31)
    dim = 64
    mu = torch.tanh(torch.randn(1, dim, generator=generator)) + 0.01 * torch.randn(300, dim, generator=generator)
    logvar = -10.0 + 0.01 * torch.rand(300, dim, generator=generator)
    items = GaussianEmbeddings(mu, logvar)
    queries = GaussianEmbeddings(
        mu[:6] + 1e-4 * torch.randn(6, dim, generator=generator),
        logvar[:6] + 1e-3 * torch.randn(6, dim, generator=generator),
    )
    lancedb = {"uri": tmp_path / "db"} if backend.startswith("lancedb") else {}
    index = GaussianIndex(dim, reduction, backend, **lancedb)
    index.add(items)
    one_step = 2.0**-23  # a float32 step, relative
    for direction, (a, b) in {"entailing": (queries, items), "entailed_by": (items, queries)}.items():
        expected = similarity_matrix(a.mu, a.logvar, b.mu, b.logvar, reduction)
        expected = expected if direction == "entailing" else expected.T
        scores, ids = getattr(index, direction)(queries, 10)
        torch.testing.assert_close(scores, expected.gather(1, ids), rtol=one_step, atol=0.0)
        if backend in ("faiss", "lancedb"):  # the exact ones: the top 10 of the model's own scores
            assert_top_k(ids, scores, expected, rtol=one_step)


@pytest.mark.parametrize("backend", ["torch", "faiss", "faiss-hnsw", "lancedb", "lancedb-ann"])
@pytest.mark.parametrize("kl_weight", [0.0, 0.3, 8.0])
def test_every_backend_ranks_by_the_search_score_and_keeps_it_when_reopened(backend, kl_weight, tmp_path):
    """``kl_weight=λ``: both directions rank by cos(μ_q, μ_x) − λ·KL/d and return it (scikit-learn's cosine,
    torch.distributions' KL), λ = 0 being the cosine; the exact backends give the exact top 10, the approximate ones
    most of it; a saved (or reopened) index keeps λ."""
    items, queries = low_rank_gaussians(1200, seed=40), low_rank_gaussians(20, seed=41)
    lancedb = {"uri": tmp_path / "db"} if backend.startswith("lancedb") else {}
    index = GaussianIndex(64, "mean_kl", backend, kl_weight=kl_weight, **lancedb)
    index.add(items)
    if lancedb:
        reopened = GaussianIndex.load(tmp_path / "db")
    else:
        index.save(tmp_path / "saved")
        reopened = GaussianIndex.load(tmp_path / "saved")
    assert reopened.kl_weight == kl_weight
    for searched in (index, reopened):
        for direction in ("entailing", "entailed_by"):
            expected = reference_search_score(queries, items, kl_weight, direction)
            scores, ids = getattr(searched, direction)(queries, 10)
            torch.testing.assert_close(scores.double(), expected.gather(1, ids), rtol=1e-6, atol=1e-7)
            if backend in ("torch", "faiss", "lancedb"):
                assert_top_k(ids, scores, expected, rtol=1e-6)
            else:
                best = expected.topk(10, dim=1).indices.tolist()
                found = sum(len(set(a) & set(b)) for a, b in zip(best, ids.tolist(), strict=True))
                assert found / ids.numel() >= 0.8, (direction, found)


@pytest.mark.parametrize("kl_weight", [None, 0.0, 0.3])
@pytest.mark.parametrize("direction", ["entailing", "entailed_by"])
def test_the_lift_keeps_the_inner_product_up_to_a_per_query_scale_and_shift(direction, kl_weight):
    """What the approximate backends hand to an L2 index: for each query, ⟨lifted query, lifted item⟩ = a·score + b
    with a > 0 (the ranking kept exactly), the score being −KL or the search score (scikit-learn, torch.distributions),
    for the items inside the graph."""
    from gausscse.search.lift import fit_lift, query_vectors

    items, queries = low_rank_gaussians(400, seed=42), low_rank_gaussians(6, seed=43)
    transform, inliers, vectors = fit_lift(items, direction, kl_weight)
    products = torch.from_numpy(query_vectors(queries, direction, kl_weight, transform) @ vectors.T).double()
    if kl_weight is None:
        pair = (queries, items) if direction == "entailing" else (items, queries)
        similarity = reference_similarity(pair[0].mu, pair[0].logvar, pair[1].mu, pair[1].logvar, "sum")
        score = -(1.0 / similarity - 1.0)
        score = score if direction == "entailing" else score.T
    else:
        score = reference_search_score(queries, items, kl_weight, direction)
    score = score[:, torch.from_numpy(inliers)]
    for row, target in zip(products, score, strict=True):
        design = torch.stack([target, torch.ones_like(target)], dim=1)
        (scale, shift), *_ = torch.linalg.lstsq(design, row[:, None])
        assert float(scale) > 0
        torch.testing.assert_close(
            design @ torch.stack([scale, shift]), row[:, None], rtol=0, atol=1e-4 * row.abs().max()
        )


def test_the_search_score_differs_from_the_similarity_ranking():
    """The two rankings an index offers are different orders (else the test above could pass on the similarity)."""
    items, queries = low_rank_gaussians(300, seed=40), low_rank_gaussians(5, seed=41)
    by_similarity, by_search = GaussianIndex(64, "mean_kl"), GaussianIndex(64, "mean_kl", kl_weight=0.3)
    for index in (by_similarity, by_search):
        index.add(items)
    assert by_similarity.entailing(queries, 10)[1].tolist() != by_search.entailing(queries, 10)[1].tolist()
    with pytest.raises(ValueError, match="kl_weight must be a finite number >= 0"):
        GaussianIndex(64, "mean_kl", kl_weight=-1.0)


def test_items_an_index_cannot_score_are_refused_at_add_naming_the_row():
    items = gaussians(4, seed=23)
    index = GaussianIndex(12, "sum")
    too_far = GaussianEmbeddings(items.mu.clone(), items.logvar.clone())
    too_far.mu[1, 0] = 1e16  # μ² = 1e32
    with pytest.raises(ValueError, match=r"embeddings\[1\] is too extreme to search.* reaches 1e\+32"):
        index.add(too_far)
    assert len(index) == 0  # nothing half-added
    index.add(items)
    with pytest.raises(ValueError, match=r"queries\[1\] is too extreme"):
        index.entailing(too_far, 2)


@pytest.mark.parametrize("backend", ["faiss", "faiss-hnsw"])
def test_a_saved_faiss_index_answers_its_first_query_without_building(backend, tmp_path, monkeypatch):
    items, queries = gaussians(300, seed=24), gaussians(4, seed=25)
    GaussianIndex(12, "sum", backend).save(tmp_path / "empty")  # an empty index saves without FAISS files
    fresh = GaussianIndex(12, "sum", backend)
    fresh.add(items)  # never queried: no FAISS index built yet ...
    fresh.save(tmp_path / "index")  # ... so saving builds it
    assert {"entailing.faiss", "entailed_by.faiss"} <= {path.name for path in (tmp_path / "index").iterdir()}
    # the answers of the graph that was saved (another HNSW build may link other neighbours: threads insert in parallel)
    expected = {direction: getattr(fresh, direction)(queries, 5) for direction in ("entailing", "entailed_by")}

    def no_build(*args, **kwargs):
        raise AssertionError("the loaded index rebuilt its FAISS index")

    monkeypatch.setattr(faiss_backend.FaissDirection, "build", no_build)
    loaded = GaussianIndex.load(tmp_path / "index")
    for direction, (scores, ids) in expected.items():
        loaded_scores, loaded_ids = getattr(loaded, direction)(queries, 5)
        assert loaded_ids.tolist() == ids.tolist()
        torch.testing.assert_close(loaded_scores, scores)


def test_saving_into_a_symlinked_folder_keeps_the_link(tmp_path):
    target = tmp_path / "real" / "index"
    target.parent.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    items = gaussians(10, seed=26)
    for count in (5, 10):  # a new folder behind the link, then a replaced one
        index = GaussianIndex(12, "sum")
        index.add(items[:count])
        SentenceIndex(index, [f"s{number}" for number in range(count)]).save(link)
        assert link.is_symlink() and link.resolve() == target.resolve()
        assert len(SentenceIndex.load(link)) == count == len(SentenceIndex.load(target))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link", "real"]  # no stray staging or link
    assert sorted(path.name for path in target.parent.iterdir()) == ["index"]


def two_corpora() -> list[SentenceIndex]:
    """Two different SentenceIndexes: every Gaussian of corpus "A" has μ = 0, of corpus "B" μ = 1; their sentences
    start with the corpus's letter."""
    corpora = []
    for letter, mean, count in (("A", 0.0, 200), ("B", 1.0, 300)):
        index = GaussianIndex(12, "sum")
        index.add(GaussianEmbeddings(torch.full((count, 12), mean), torch.zeros(count, 12)))
        corpora.append(SentenceIndex(index, [f"{letter}{number}" for number in range(count)], letter))
    return corpora


WRITER = """
import sys, time
sys.path.insert(0, {root!r})
from tests.search.test_search import two_corpora
corpora = two_corpora()
end = time.monotonic() + {seconds}
saves = 0
while time.monotonic() < end:
    corpora[saves % 2].save({folder!r})
    saves += 1
print(saves)
"""


def test_a_load_during_saves_sees_one_whole_index(tmp_path):
    """A writer process saves two different corpora over one folder as fast as it can; every load must pair one
    corpus's Gaussians with its own sentences and model name (the old one-file-at-a-time read mixed them in 7 %)."""
    folder = tmp_path / "index"
    two_corpora()[0].save(folder)
    root = str(Path(__file__).resolve().parents[2])
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(root=root, seconds=6, folder=str(folder))],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    loads, seen = 0, set()
    try:
        while writer.poll() is None:
            corpus = SentenceIndex.load(folder)
            letter = corpus.model_name
            expected_mean = 0.0 if letter == "A" else 1.0
            assert len(corpus) == (200 if letter == "A" else 300)
            assert all(sentence.startswith(letter) for sentence in corpus.sentences), letter
            assert bool((corpus.index.mu == expected_mean).all()), letter
            loads, seen = loads + 1, seen | {letter}
    finally:
        writer.kill()
        saves = writer.communicate()[0]
    assert writer.returncode in (0, -9)
    assert seen == {"A", "B"} and loads > 50, (loads, seen, saves)


def test_two_saves_into_one_folder_at_once_leave_one_whole_index(tmp_path, monkeypatch):
    """Corpus A's save pauses after moving in its manifest while corpus B's save runs in another thread: B waits for A's
    move to end, so the folder ends as one whole corpus (without the wait, A's files land under B's manifest and the
    folder is refused from then on)."""
    from gausscse.io import move_in

    folder, (first, second) = tmp_path / "index", two_corpora()
    first.save(folder)
    paused, second_saved = threading.Event(), threading.Event()

    def pausing_move_in(staging, target, names):
        names = list(names)
        move_in(staging, target, names[:1])
        if threading.current_thread().name == "A":  # the manifest is in: let B's save run now if it can
            paused.set()
            second_saved.wait(timeout=0.5)
        move_in(staging, target, names[1:])

    monkeypatch.setattr("gausscse.io.move_in", pausing_move_in)

    def save_second() -> None:
        paused.wait()
        second.save(folder)
        second_saved.set()

    threads = [threading.Thread(target=first.save, args=(folder,), name="A"), threading.Thread(target=save_second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    loaded = SentenceIndex.load(folder)
    assert loaded.model_name == "B" and len(loaded) == 300
    assert all(sentence.startswith("B") for sentence in loaded.sentences)


def test_damaged_index_files_are_named(tmp_path):
    index = GaussianIndex(12, "sum", "faiss")
    index.add(gaussians(8, seed=27))
    corpus = SentenceIndex(index, [f"s{number}" for number in range(8)], "m")
    corpus.save(tmp_path / "index")

    def damaged(name: str, content: bytes | None, manifest: bool = False) -> Path:
        """A copy of the saved index with ``name`` replaced (``None``: removed); without its manifest unless
        ``manifest`` (an index saved before manifests existed)."""
        copy = tmp_path / f"copy{len(list(tmp_path.iterdir()))}"
        shutil.copytree(tmp_path / "index", copy)
        if not manifest:
            (copy / "manifest.json").unlink()
        if content is None:
            (copy / name).unlink()
        else:
            (copy / name).write_bytes(content)
        return copy

    lines = (tmp_path / "index" / "sentences.jsonl").read_text().splitlines()
    sizeless = json.loads((tmp_path / "index" / "index_config.json").read_text())
    sizeless["size"] = "5"
    other_dim = {**sizeless, "size": 8, "dim": 8}  # valid Gaussians of another d: not "damaged"
    cases = {
        ("index_config.json", json.dumps(other_dim).encode(), False): r"safetensors: stored have dimension 12, the",
        ("index_config.json", json.dumps(sizeless).encode(), False): r"holds 8 Gaussians, .*config.json says '5'",
        ("gaussians.safetensors", b"garbage", True): r"gaussians.safetensors changed after it was saved",
        ("sentences.jsonl", None, True): r"sentences.jsonl is missing \(listed in manifest.json\)",
        ("manifest.json", b"{", True): r"manifest.json is damaged",
        ("gaussians.safetensors", b"garbage", False): r"gaussians.safetensors is damaged",
        ("index_config.json", b'{\n  "dim": 12,\n  oops\n}', False): r"index_config.json, line 3: not JSON",
        ("index_config.json", b'{"dim": 12}', False): r"index_config.json has no 'reduction'",
        ("entailing.faiss", b"garbage!", False): r"entailing.faiss is not a FAISS index FAISS can read",
        ("sentences.jsonl", "\n".join([*lines[:5], "{oops", *lines[6:]]).encode(), False): r"jsonl, line 6: not JSON",
        ("sentences.jsonl", "\n".join([*lines[:5], "7", *lines[6:]]).encode(), False): r"line 6: not a JSON string",
        ("corpus.json", b"[1]", False): r"corpus.json: not a JSON object",
    }
    for (name, content, manifest), message in cases.items():
        with pytest.raises(ValueError, match=message):
            SentenceIndex.load(damaged(name, content, manifest))
    with pytest.raises(FileNotFoundError, match=r"gaussians.safetensors is missing"):
        SentenceIndex.load(damaged("gaussians.safetensors", None))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gausscse.cli.search",
            "query",
            "--index",
            str(damaged("corpus.json", b"{", True)),
            "--entailing",
            "x",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert done.returncode == 2 and "corpus.json changed after it was saved" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_text_corpus_saved_with_a_byte_order_mark_reads_clean_sentences(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes("A dog runs.\nA cat sleeps.\n".encode("utf-8-sig"))  # as Windows editors save UTF-8
    assert read_corpus(path, None) == ["A dog runs.", "A cat sleeps."]


@pytest.mark.parametrize("content", [b"not gzip at all", gzip.compress(b"A dog runs.\nA cat sleeps.\n", mtime=0)[:-12]])
def test_a_bad_gzip_corpus_is_named(tmp_path, content):
    path = tmp_path / "corpus.txt.gz"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"--corpus .*corpus.txt.gz: not a whole gzip file"):
        read_corpus(path, None)


def test_an_index_refuses_another_model_unless_asked(
    tiny_model_folder, make_tiny_model, minilm_tokenizer, tmp_path, monkeypatch, capsys
):
    other = tmp_path / "other"
    make_tiny_model(similarity_reduction="sum", seed=1).save_pretrained(other)
    minilm_tokenizer.save_pretrained(other)
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    relative_model = os.path.relpath(tiny_model_folder, workdir)
    search_main(["build", "--model", relative_model, "--corpus", str(corpus_path), "--index", "ix"])
    index = workdir / "ix"
    query = ["query", "--index", str(index), "--entailing", "A man."]
    monkeypatch.chdir(tmp_path)  # another folder: the relative --model was stored resolved
    search_main(query)
    capsys.readouterr()
    monkeypatch.setattr(sys, "argv", ["gausscse-search", *query, "--model", str(other)])
    with pytest.raises(SystemExit) as refused:
        search_run()  # the console entry point
    stderr = capsys.readouterr().err
    assert refused.value.code == 2 and "Traceback" not in stderr
    assert "was built with" in stderr and "--allow_model_mismatch" in stderr, stderr
    search_main([*query, "--model", str(other), "--allow_model_mismatch"])
    from gausscse import GaussCSEModel
    from gausscse.search import ModelMismatchError, model_fingerprint

    corpus = SentenceIndex.load(index)
    same = GaussCSEModel.from_pretrained(tiny_model_folder).eval()
    assert model_fingerprint(same) == corpus.model_fingerprint  # saved and loaded again: the same model
    assert corpus.entailing(same, ["A man."], k=2)
    with torch.no_grad():  # the same object, fine-tuned in place after its first search
        same.logvar_head.bias.add_(1.0)
    with pytest.raises(ModelMismatchError):
        corpus.entailing(same, ["A man."], k=2)
    with pytest.raises(ModelMismatchError, match=r"was built with .*: search with the index's model, rebuild"):
        corpus.entailed_by(GaussCSEModel.from_pretrained(other).eval(), ["A man."], k=2)
    changed = GaussCSEModel.from_pretrained(tiny_model_folder).eval()
    changed.config.similarity_reduction = "mean_kl"  # same weights, another similarity
    with pytest.raises(ModelMismatchError):
        corpus.entailing(changed, ["A man."], k=2)


def test_an_empty_corpus_index_round_trips(tmp_path):
    SentenceIndex(GaussianIndex(12, "sum"), [], "m").save(tmp_path / "empty")
    loaded = SentenceIndex.load(tmp_path / "empty")
    assert len(loaded) == 0 and loaded.sentences == [] and loaded.model_name == "m"


@pytest.mark.parametrize("backend", ["lancedb", "lancedb-ann"])
@pytest.mark.parametrize("reduction", ["sum", "mean_kl"])
def test_lancedb_backend_is_exact_in_both_directions_and_after_reopening(backend, reduction, tmp_path):
    """Several adds (sentences stored), the brute-force top k in both directions; reopened by its uri, and through a
    saved folder that names it, it answers the same and goes on adding to the same database."""
    items, queries = gaussians(300, seed=11, dim=16), gaussians(6, seed=12, dim=16)
    uri = tmp_path / "db"
    index = GaussianIndex(16, reduction, backend, uri=uri)
    index.add(items[:200], [f"sentence {number}" for number in range(200)])
    index.add(items[200:280])  # no sentences: stored as null
    for k in (1, 10, 280):
        check_against_brute_force(index, queries, items[:280], k)
    if backend == "lancedb-ann":
        assert index.engine.table.ann_covers(len(index))  # LanceDB's own IVF index answered
    index.save(tmp_path / "saved")
    for reopened in (GaussianIndex.load(uri), GaussianIndex.load(tmp_path / "saved")):
        assert (reopened.backend, reopened.reduction, len(reopened)) == (backend, reduction, 280)
        check_against_brute_force(reopened, queries, items[:280], 10)
    reopened = GaussianIndex.load(uri)
    reopened.add(items[280:])  # ids continue in the same database
    check_against_brute_force(GaussianIndex.load(uri), queries, items, 10)
    _, sentences = GaussianIndex.load(uri).engine.table.read()
    assert sentences == [f"sentence {number}" for number in range(200)] + [None] * 100


def broad_and_narrow_gaussians(count: int, seed: int) -> GaussianEmbeddings:
    """``low_rank_gaussians`` plus a per-item offset of every log σ² (general and specific sentences): stored
    feature maps whose norms differ from row to row, as a trained model's do."""
    gaussians_ = low_rank_gaussians(count, seed)
    offset = 0.7 * torch.randn(count, 1, generator=torch.Generator().manual_seed(seed + 100))
    return GaussianEmbeddings(gaussians_.mu, (gaussians_.logvar + offset).clamp(-10, 10))


@pytest.mark.parametrize("direction", ["entailing", "entailed_by"])
def test_lancedb_ann_recall_at_10_with_few_partitions_probed(direction, tmp_path):
    """5 of 11 IVF partitions probed: LanceDB's index on the lifted vectors (L2) finds the true top 10, which an IVF
    index on the raw vectors under ``dot`` (the backend's first version) did not here."""
    items, queries = broad_and_narrow_gaussians(3000, seed=12), broad_and_narrow_gaussians(50, seed=13)
    exact = GaussianIndex(64, "sum")
    approximate = GaussianIndex(64, "sum", "lancedb-ann", uri=tmp_path / "db", nprobes=5)
    for index in (exact, approximate):
        index.add(items)
    _, expected = getattr(exact, direction)(queries, 10)
    scores, found = getattr(approximate, direction)(queries, 10)
    ann = approximate.engine.table.ann_tables()[direction]
    assert [index.index_type for index in ann.table.list_indices()] == ["IvfFlat"]
    assert ann.table.count_rows() + len(ann.transform["outliers"]) == ann.rows == 3000
    recall = sum(len(set(a) & set(b)) for a, b in zip(expected.tolist(), found.tolist(), strict=True)) / 500
    # LanceDB's k-means is unseeded and its float32 kernels differ by CPU, so recall varies from build to build; IVF
    # on the raw vectors under dot found only a small part of the top 10, so 0.8 still tells the lifted index from it
    assert recall >= 0.8, recall
    assert (scores[:, :-1] >= scores[:, 1:]).all()  # re-scored: exact similarities, best first


def test_lancedb_ann_finds_later_rows_and_kept_out_items_and_rebuilds_when_outnumbered(tmp_path):
    """Rows added after the ANN build are scanned flat, items of extreme norm are on every shortlist, and once the
    later rows outnumber the indexed ones the next search rebuilds; all of it survives reopening by uri. Every
    partition is probed (2 of them), so any id lost on the way shows as a difference from the brute force."""
    items = gaussians(1400, seed=21, dim=16)
    narrow = GaussianEmbeddings(items.mu[:2], torch.full((2, 16), -9.0))  # 1/σ² = e^9: kept out of the IVF table
    items = GaussianEmbeddings(torch.cat([narrow.mu, items.mu[2:]]), torch.cat([narrow.logvar, items.logvar[2:]]))
    queries = GaussianEmbeddings(
        torch.cat([items.mu[:1], gaussians(5, seed=22, dim=16).mu]),
        torch.cat([torch.full((1, 16), -9.0), gaussians(5, seed=22, dim=16).logvar]),
    )  # the first query entails the narrow items best
    uri = tmp_path / "db"
    index = GaussianIndex(16, "sum", "lancedb-ann", uri=uri)
    index.add(items[:600])
    check_against_brute_force(index, queries, items[:600], 10)  # builds from 600 rows
    built = index.engine.table.ann_tables()
    assert {direction: table.rows for direction, table in built.items()} == {"entailing": 600, "entailed_by": 600}
    assert {0, 1} <= set(built["entailing"].transform["outliers"].tolist())
    index.add(items[600:1000])  # 400 later rows: flat-scanned beside the index
    check_against_brute_force(index, queries, items[:1000], 10)
    assert index.engine.table.ann_tables() is built
    check_against_brute_force(GaussianIndex.load(uri), queries, items[:1000], 10)
    index.add(items[1000:])  # 800 later rows outnumber the 600 indexed: the next search rebuilds
    check_against_brute_force(index, queries, items, 10)
    assert {direction: table.rows for direction, table in index.engine.table.ann_tables().items()} == {
        "entailing": 1400,
        "entailed_by": 1400,
    }
    reopened = GaussianIndex.load(uri)
    check_against_brute_force(reopened, queries, items, 10)
    assert reopened.engine.table.ann_tables()["entailed_by"].rows == 1400


@pytest.mark.parametrize("backend", ["faiss-hnsw", "lancedb-ann"])
@pytest.mark.parametrize("direction", ["entailing", "entailed_by"])
def test_approximate_recall_when_log_variances_sit_at_the_clamp(backend, direction, tmp_path):
    """Half the dimensions' log σ² pinned at the model's −10 in every row (as a trained model leaves many): their
    1/σ² = e^10 columns are alike in every row. Centred before scaling they vanish; uncentred, their shared offset
    left the differences between items to float32 rounding and FAISS HNSW found almost none of the top 10."""

    def pinned(count: int, seed: int) -> GaussianEmbeddings:
        gaussians_ = low_rank_gaussians(count, seed)
        logvar = gaussians_.logvar.clone()
        logvar[:, ::2] = -10.0
        return GaussianEmbeddings(gaussians_.mu, logvar)

    items, queries = pinned(3000, seed=12), pinned(50, seed=13)
    exact = GaussianIndex(64, "sum")
    settings = {"uri": tmp_path / "db", "nprobes": 5} if backend == "lancedb-ann" else {"ef_search": 32}
    approximate = GaussianIndex(64, "sum", backend, **settings)
    for index in (exact, approximate):
        index.add(items)
    _, expected = getattr(exact, direction)(queries, 10)
    _, found = getattr(approximate, direction)(queries, 10)
    recall = sum(len(set(a) & set(b)) for a, b in zip(expected.tolist(), found.tolist(), strict=True)) / 500
    # recall varies over builds (unseeded k-means, HNSW insertion order, CPU-specific float32); uncentred columns
    # found almost nothing, so 0.8 still tells the two apart
    assert recall >= 0.8, recall


def test_lancedb_stores_the_kl_vectors_raw_and_its_dot_metric_ranks_by_kl(tmp_path):
    """The database itself, read with lancedb: each row's entailing_vector · (−A(q)) is −KL(q‖x) from
    torch.distributions (stored unnormalised), and LanceDB's own dot search orders the rows by that KL."""
    import lancedb

    from gausscse.model.gaussian import kl_feature_map

    items, query = gaussians(50, seed=13, dim=8), gaussians(1, seed=14, dim=8)
    GaussianIndex(8, "sum", "lancedb", uri=tmp_path / "db").add(items)
    table = lancedb.connect(str(tmp_path / "db")).open_table("gaussians")
    rows = table.to_arrow().sort_by("id")
    stored = torch.tensor(rows["entailing_vector"].to_pylist(), dtype=torch.float64)
    minus_a = -kl_feature_map(query.mu, query.logvar, "left")[0]
    sim = reference_similarity(query.mu, query.logvar, items.mu, items.logvar, "sum")[0]
    kl = 1.0 / sim - 1.0  # sum: sim = 1 / (1 + KL)
    torch.testing.assert_close(stored @ minus_a, -kl, rtol=1e-4, atol=1e-4)
    found = table.search(minus_a.float().numpy(), vector_column_name="entailing_vector").distance_type("dot")
    found_ids = found.limit(50).to_arrow()["id"].to_pylist()
    assert found_ids == sorted(range(50), key=lambda item: float(kl[item]))


def test_lancedb_errors_are_named(tmp_path):
    items = gaussians(5, seed=15)
    with pytest.raises(ValueError, match=r"uri \(the LanceDB database folder\) is for backend 'lancedb'"):
        GaussianIndex(12, "sum", "lancedb")
    with pytest.raises(ValueError, match=r"uri \(the LanceDB database folder\) is for backend 'lancedb'"):
        GaussianIndex(12, "sum", "torch", uri=tmp_path / "db")
    GaussianIndex(12, "sum", "lancedb", uri=tmp_path / "db").add(items)
    with pytest.raises(FileExistsError, match=r"database: reopen it with GaussianIndex.load\('.*db'\), remove it or"):
        GaussianIndex(12, "sum", "lancedb", uri=tmp_path / "db")
    assert len(GaussianIndex.load(tmp_path / "db")) == 5  # the refused constructor changed nothing
    with pytest.raises(ValueError, match=r"sentences must be a list of 5 strings"):
        GaussianIndex.load(tmp_path / "db").add(items, ["only one"])
    with pytest.raises(ValueError, match=r"stored by the database backends \(LanceDB, .*pgvector\), not 'torch'"):
        GaussianIndex(12, "sum").add(items, ["s"] * 5)
    with pytest.raises(FileNotFoundError, match=r"empty does not exist: no GaussianIndex database there"):
        GaussianIndex.open("lancedb", tmp_path / "empty")
    with pytest.raises(ValueError, match=r"must be a database backend, one of \['lancedb', .*got 'faiss'"):
        GaussianIndex.open("faiss", tmp_path / "db")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match=r"holds no GaussianIndex table"):
        GaussianIndex.open("lancedb", tmp_path / "empty")
    import lancedb  # a table whose columns are 12 wide, its settings saying d = 8: named, not a reshape error

    rows = lancedb.connect(str(tmp_path / "db")).open_table("gaussians").to_arrow()
    settings = {**json.loads(rows.schema.metadata[b"gausscse"]), "dim": 8}
    wrong = rows.replace_schema_metadata({"gausscse": json.dumps(settings)})
    lancedb.connect(str(tmp_path / "bad")).create_table("gaussians", wrong)
    with pytest.raises(ValueError, match=r"bad LanceDB table have dimension 12, the index 8"):
        GaussianIndex.load(tmp_path / "bad")


def test_cli_builds_and_queries_a_lancedb_index(tiny_model_folder, tmp_path):
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    build = ["build", "--model", str(tiny_model_folder), "--corpus", str(corpus_path), "--index", str(tmp_path / "ix")]
    search_main([*build, "--backend", "lancedb"])
    assert (tmp_path / "ix.lancedb" / "gaussians.lance").is_dir()  # the default uri, beside the index folder
    hits = search_main(["query", "--index", str(tmp_path / "ix"), "--entailing", "Someone makes music.", "-k", "3"])
    from gausscse import GaussCSEModel

    model = GaussCSEModel.from_pretrained(tiny_model_folder).eval()
    distinct = [sentence for sentence in dict.fromkeys(CORPUS) if sentence]
    scores = model.similarity(["Someone makes music."], distinct)
    assert_top_k([[hit["id"] for hit in hits[0]]], [[hit["score"] for hit in hits[0]]], scores, rtol=1e-4)  # as above
    with pytest.raises(ValueError, match=r"--uri .*ix\.lancedb already holds a GaussianIndex database"):
        search_main([*build, "--backend", "lancedb"])
    with pytest.raises(ValueError, match=r"--uri is not for --backend torch: uri \(the LanceDB database folder\) is"):
        search_main([*build, "--uri", str(tmp_path / "other")])


def test_a_shortlist_slot_without_a_candidate_ranks_last():
    """A backend pads a short shortlist with id −1 (an ANN that found fewer, a row another handle added later):
    re-scoring gives it −inf, after every real candidate, whose scores are the exact similarities."""
    index = GaussianIndex(12, "sum")
    items, queries = gaussians(6, seed=0), gaussians(2, seed=1)
    index.add(items)
    candidates = torch.tensor([[3, -1, 0, 5], [-1, -1, 2, 1]])
    scores, ids = index.rescore(queries, candidates, "entailing")
    exact = reference_similarity(queries.mu, queries.logvar, items.mu, items.logvar, "sum")
    for row in range(2):
        real = candidates[row][candidates[row] >= 0]
        expected = exact[row, real].sort(descending=True)
        assert ids[row, : len(real)].tolist() == real[expected.indices].tolist()
        torch.testing.assert_close(scores[row, : len(real)].double(), expected.values, rtol=1e-5, atol=1e-7)
        assert torch.isinf(scores[row, len(real) :]).all() and (ids[row, len(real) :] == -1).all()
