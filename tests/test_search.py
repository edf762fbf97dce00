"""Entailment search: every backend's top-k against a brute force from torch.distributions (both directions, ties,
k = 1 and k = len), several adds, save/load with FAISS files, named errors, the corpus index and the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from gausscse import GaussianEmbeddings
from gausscse.cli.search import main as search_main
from gausscse.cli.search import read_corpus
from gausscse.search import GaussianIndex, SentenceIndex
from gausscse.search import index as index_module

from .helpers import reference_similarity


def gaussians(count: int, seed: int, dim: int = 12) -> GaussianEmbeddings:
    """Means in tanh range, log σ² around −1 with spread 1.5 (clamped to the model's ±10)."""
    generator = torch.Generator().manual_seed(seed)
    mu = torch.tanh(torch.randn(count, dim, generator=generator))
    logvar = (1.5 * torch.randn(count, dim, generator=generator) - 1.0).clamp(-10, 10)
    return GaussianEmbeddings(mu, logvar)


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
    assert {name: built.faiss_index.ntotal for name, built in index._faiss.items()} == {
        "entailing": 50,
        "entailed_by": 50,
    }
    index.save(tmp_path / "index")
    transforms = [] if backend == "faiss" else ["entailed_by.transform.safetensors", "entailing.transform.safetensors"]
    assert sorted(path.name for path in (tmp_path / "index").iterdir()) == sorted(
        ["entailed_by.faiss", "entailing.faiss", "gaussians.safetensors", "index_config.json", *transforms]
    )
    loaded = GaussianIndex.load(tmp_path / "index")
    assert {name: built.faiss_index.ntotal for name, built in loaded._faiss.items()} == {
        "entailing": 50,
        "entailed_by": 50,
    }  # read back, not rebuilt
    check_against_brute_force(loaded, queries, items, k=5)


def test_an_approximate_index_is_extended_in_place_or_rebuilt_when_an_item_falls_outside_it():
    items = gaussians(40, seed=10)
    index = GaussianIndex(12, "sum", "faiss-hnsw", candidates_per_result=41)
    index.add(items)
    built = index.faiss_direction("entailing")
    index.add(items[:1])  # a copy of a stored item fits the transform: added in place
    assert index.faiss_direction("entailing") is built and built.faiss_index.ntotal == 41
    narrow = GaussianEmbeddings(items.mu[:1], torch.full((1, 12), -9.0))  # 1/σ² = e^9: far outside
    index.add(narrow)
    rebuilt = index.faiss_direction("entailing")
    assert rebuilt is not built and rebuilt.faiss_index.ntotal == 42
    all_items = GaussianEmbeddings(
        torch.cat([items.mu, items.mu[:1], narrow.mu]), torch.cat([items.logvar, items.logvar[:1], narrow.logvar])
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
    assert recall >= 0.95, recall
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
    make_tiny_model(similarity_reduction="sum").save_pretrained(folder)
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
        command = [sys.executable, "-m", "gausscse.search", "query", "--index", str(tmp_path / "ix"), flag, *claims]
        done = subprocess.run([*command, "-k", "3", "--json"], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        hits = json.loads(done.stdout)
        for row, row_scores in zip(hits, scores, strict=True):
            order = sorted(range(len(distinct)), key=lambda item, s=row_scores: (-float(s[item]), item))[:3]
            assert [hit["id"] for hit in row] == order
            assert [hit["sentence"] for hit in row] == [distinct[item] for item in order]
            torch.testing.assert_close(torch.tensor([hit["score"] for hit in row]), row_scores[order])


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
        "gausscse.search",
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
    GaussianEmbeddings is another class with the same fields (tests/test_model_card.py runs that case for real)."""
    from dataclasses import dataclass

    @dataclass
    class ShippedGaussianEmbeddings:
        mu: torch.Tensor
        logvar: torch.Tensor

    items, queries = gaussians(9, seed=14), gaussians(2, seed=15)
    index = GaussianIndex(12, "sum")
    index.add(ShippedGaussianEmbeddings(items.mu, items.logvar))
    check_against_brute_force(index, ShippedGaussianEmbeddings(queries.mu, queries.logvar), items, k=3)
