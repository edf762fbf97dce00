"""Encoding on Ray (``gausscse.search.ray_encode``) on a local 2-CPU Ray: 10,000 sentences come back as the
Gaussians ``model.encode`` gives, in input order, and search alike; bad input and a missing Ray are named."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import ray
import torch

from gausscse.loading import load_model
from gausscse.search import GaussianIndex
from gausscse.search.ray_encode import GaussianEncoder, encode_on_ray

from ..helpers import ACROSS_PROCESSES, ACTIONS, PLACES, SUBJECTS, tiny_model

SENTENCES = [
    f"{SUBJECTS[k % 8]} {ACTIONS[k % 4]}{' and smiles' * (k % 7)} {PLACES[k // 8 % 4]} number {k}"
    for k in range(10_000)
]  # lengths vary, so model.encode's length sort reorders them


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, minilm_tokenizer):
    """A tiny random model (wide initialisation: sentences far apart, no near-ties) saved with the MiniLM tokenizer."""
    folder = tmp_path_factory.mktemp("ray") / "model"
    tiny_model(similarity_reduction="sum", initializer_range=0.2).save_pretrained(folder)
    minilm_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def encoded(local_ray, model_folder):
    """(Gaussians from Ray, from ``model.encode``) of ``SENTENCES``: 10 blocks over 2 workers."""
    on_ray = encode_on_ray(model_folder, SENTENCES, num_workers=2, batch_size=64, rows_per_task=1000)
    return on_ray, load_model(model_folder).encode(SENTENCES, batch_size=64)


def test_ray_gives_the_gaussians_of_model_encode_in_input_order(encoded):
    on_ray, local = encoded
    assert on_ray.mu.dtype == on_ray.logvar.dtype == torch.float32
    assert on_ray.mu.shape == local.mu.shape == (10_000, local.dim)
    torch.testing.assert_close(on_ray.mu, local.mu, **ACROSS_PROCESSES)
    torch.testing.assert_close(on_ray.logvar, local.logvar, **ACROSS_PROCESSES)


def test_an_index_filled_from_ray_answers_like_one_filled_from_encode(encoded, model_folder):
    on_ray, local = encoded
    claims = load_model(model_folder).encode(["a man is outside", "two children are cooking", SENTENCES[4321]])
    indexes = []
    for gaussians in (on_ray, local):
        index = GaussianIndex(local.dim, "sum")
        index.add(gaussians)
        indexes.append(index)
    for direction in ("entailing", "entailed_by"):
        (ray_scores, ray_ids), (scores, ids) = (getattr(index, direction)(claims, 10) for index in indexes)
        assert ray_ids.tolist() == ids.tolist(), direction  # their top 11 scores are ≥ 7e-5 (relative) apart
        torch.testing.assert_close(ray_scores, scores, rtol=1e-4, atol=1e-6)


def test_bad_input_is_named_before_ray_runs(model_folder, monkeypatch):
    with pytest.raises(TypeError, match=r"sentences\[2\] must be a string, got int: 7"):
        encode_on_ray(model_folder, ["a man is outside", "a dog", 7, "a cat"])
    with pytest.raises(ValueError, match="the corpus is empty"):
        encode_on_ray(model_folder, [])
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(ImportError, match=r'pip install "gausscse\[ray\]"'):
        encode_on_ray(model_folder, ["a man is outside"])


def test_impossible_ray_resources_end_the_command_with_one_line(model_folder, tmp_path, capsys, monkeypatch):
    """--ray_workers 0 is refused before Ray starts (it would wait forever for a CPU); --ray auto with no cluster
    running is one line and exit 2, not ray's ConnectionError traceback."""
    from gausscse.cli.search import run

    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("a man is outside\na dog runs\n", encoding="utf-8")
    common = ["gausscse-search", "build", "--model", str(model_folder), "--corpus", str(corpus_path)]
    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh process
    monkeypatch.setattr(ray, "init", lambda **kwargs: pytest.fail(f"ray.init({kwargs}) with 0 workers"))
    monkeypatch.setattr(sys, "argv", [*common, "--index", str(tmp_path / "zero"), "--ray", "--ray_workers", "0"])
    with pytest.raises(SystemExit) as stopped:
        run()
    assert stopped.value.code == 2 and "--ray_workers must be at least 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"num_workers \(--ray_workers\) must be a whole number >= 1, got 0"):
        encode_on_ray(model_folder, ["a man"], num_workers=0)

    def no_cluster(address=None, **kwargs):
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to.")

    monkeypatch.setattr(ray, "init", no_cluster)
    monkeypatch.setattr(sys, "argv", [*common, "--index", str(tmp_path / "auto"), "--ray", "auto"])
    with pytest.raises(SystemExit) as stopped:
        run()
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("gausscse-search: error:")]) == 1
    assert "no Ray cluster at 'auto' (Could not find any running Ray instance" in err and "ray start --head" in err


def test_the_worker_class_keeps_the_id_column_and_names_a_row_that_is_not_text(model_folder):
    encoder = GaussianEncoder(str(model_folder), batch_size=2)
    batch = encoder({"id": np.array([10, 11, 12]), "text": np.array(["a man", "a dog runs", "two cats"], dtype=object)})
    assert sorted(batch) == ["id", "logvar", "mean"] and batch["id"].tolist() == [10, 11, 12]
    local = load_model(model_folder).encode(["a man", "a dog runs", "two cats"])
    assert batch["mean"].dtype == np.float32 and batch["mean"].shape == (3, local.dim)
    torch.testing.assert_close(torch.from_numpy(batch["logvar"]), local.logvar)
    with pytest.raises(TypeError, match=r"row \{'id': 21\} is not a string: NoneType None"):
        encoder({"id": np.array([20, 21]), "text": np.array(["a man", None], dtype=object)})


def test_the_cli_encodes_on_ray_into_a_database_and_answers_as_a_local_build(
    local_ray, model_folder, tmp_path, monkeypatch
):
    """gausscse-search build --ray (the running local Ray) into Milvus Lite: the same hits as the index built from
    model.encode in this process; the Gaussians of SentenceIndex.build's embeddings= are checked against the corpus."""
    from gausscse.cli.search import main as search_main
    from gausscse.search import ray_encode
    from gausscse.search.corpus import SentenceIndex

    calls = []
    monkeypatch.setattr(ray_encode, "encode_on_ray", lambda *a, **k: calls.append(a) or encode_on_ray(*a, **k))

    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(SENTENCES[:600]) + "\n", encoding="utf-8")
    common = ["--model", str(model_folder), "--corpus", str(corpus_path)]
    search_main(["build", *common, "--index", str(tmp_path / "ray"), "--ray", "--backend", "milvus"])
    assert len(calls) == 1  # the corpus went through Ray
    search_main(["build", *common, "--index", str(tmp_path / "here")])
    claims = ["a man is outside", SENTENCES[17]]
    for flag in ("--entailing", "--entailed_by"):
        on_ray, here = (
            search_main(["query", "--index", str(tmp_path / name), flag, *claims, "-k", "5"])
            for name in ("ray", "here")
        )
        assert [[hit["id"] for hit in row] for row in on_ray] == [[hit["id"] for hit in row] for row in here], flag
    model = load_model(model_folder)
    with pytest.raises(ValueError, match=r"one Gaussian of dimension 32 per sentence \(3\), got shape \(2, 32\)"):
        SentenceIndex.build(model, ["a", "b", "c"], embeddings=model.encode(["a", "b"]))


def test_the_cli_has_each_ray_worker_write_into_pgvector_and_answers_as_a_local_build(
    local_ray, model_folder, tmp_path, monkeypatch
):
    """gausscse-search build --ray --backend pgvector: the workers add their batches to the PostgreSQL table (no
    Gaussian comes back to this process: encode_on_ray is never called) as the rows of their input positions, and the
    index answers as one built here: the same ids, sentences and scores."""
    from gausscse.cli.search import main as search_main
    from gausscse.search import ray_encode

    monkeypatch.setattr(ray_encode, "encode_on_ray", lambda *a, **k: pytest.fail("the Gaussians came to the driver"))
    corpus_path = tmp_path / "corpus.txt"
    corpus_path.write_text("\n".join(SENTENCES[:1500]) + "\n", encoding="utf-8")
    common = ["--model", str(model_folder), "--corpus", str(corpus_path), "--backend", "pgvector"]
    search_main(["build", *common, "--index", str(tmp_path / "ray"), "--ray", "--ray_workers", "2"])
    search_main(["build", *common, "--index", str(tmp_path / "here")])
    ray_index = GaussianIndex.load(tmp_path / "ray.pgdata")
    assert len(ray_index) == 1500 and ray_index.engine.table.row_count(ray_index.engine.table.name) == 1500
    claims = ["a man is outside", SENTENCES[17]]
    for flag in ("--entailing", "--entailed_by"):
        on_ray, here = (
            search_main(["query", "--index", str(tmp_path / name), flag, *claims, "-k", "5"])
            for name in ("ray", "here")
        )
        for ray_row, here_row in zip(on_ray, here, strict=True):
            assert [hit["sentence"] for hit in ray_row] == [hit["sentence"] for hit in here_row], flag
            assert [hit["id"] for hit in ray_row] == [hit["id"] for hit in here_row], flag
            torch.testing.assert_close(
                torch.tensor([hit["score"] for hit in ray_row]), torch.tensor([hit["score"] for hit in here_row]),
                **ACROSS_PROCESSES,
            )  # fmt: skip
