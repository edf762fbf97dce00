"""The README's usage example runs as written, in a fresh process, against a saved model folder, and prints the
numbers an independent computation gives."""

import ast
import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gausscse import GaussCSEConfig, GaussianEmbeddings

from .helpers import entropy, heads_by_hand, reference_search_score, reference_similarity

README = Path(__file__).resolve().parent.parent / "README.md"


def usage_example(index: int = 0) -> str:
    """The ``index``-th Python block of the README's Usage section (0: transformers, 1: sentence-transformers)."""
    section = README.read_text().split("## Usage", 1)[1]
    return re.findall(r"```python\n(.*?)```", section, re.S)[index]


def run_example(code: str, loader: str, names: tuple[str, str], model, fresh_python, tmp_path: Path):
    """Save ``model`` where the example's ``loader("folder"`` call looks, run the example unchanged in a fresh process
    printing every digit float32 holds; return the values of its two sentence lists ``names`` and its printed
    tensors."""
    folder = re.search(loader + r'\("([^"]+)"', code).group(1)
    lists = [ast.literal_eval(re.search(rf"^{name} = (\[.*\])$", code, re.M).group(1)) for name in names]
    model.save_pretrained(tmp_path / folder)
    model.get_tokenizer().save_pretrained(tmp_path / folder)
    output = fresh_python("import torch\ntorch.set_printoptions(precision=10)\n" + code, cwd=tmp_path)
    return *lists, printed_tensors(output)


def printed_tensors(output: str) -> list[list]:
    """The values of every ``tensor(...)`` and ``torch.Size(...)`` in ``output``, in print order, as nested lists."""
    values = []
    for match in re.finditer(r"(?:tensor|torch\.Size)\(\[", output):
        depth, start = 0, match.end() - 1
        for end in range(start, len(output)):
            depth += {"[": 1, "]": -1}.get(output[end], 0)
            if depth == 0:
                break
        values.append(ast.literal_eval(output[start : end + 1]))
    return values


def test_readme_usage_example_prints_the_kl_scores_of_a_saved_model(minilm_gausscse, fresh_python, tmp_path):
    code = usage_example()
    assert len(code.strip().splitlines()) <= 12
    premises, hypotheses, printed = run_example(
        code, r"AutoModel\.from_pretrained", ("premises", "hypotheses"), minilm_gausscse, fresh_python, tmp_path
    )
    shape, generality, entailment, matrix, by_similarity, by_variance = printed

    # the same numbers from the weights by hand and torch.distributions' KL (the saved model uses "sum")
    raw_mu, logvar = heads_by_hand(minilm_gausscse, minilm_gausscse.get_tokenizer(), premises + hypotheses)
    mu = torch.tanh(raw_mu)
    pre, hyp = slice(0, len(premises)), slice(len(premises), None)
    hyp_given_pre = reference_similarity(mu[hyp], logvar[hyp], mu[pre], logvar[pre], "sum")  # sim(hyp_i‖pre_j)
    pre_given_hyp = reference_similarity(mu[pre], logvar[pre], mu[hyp], logvar[hyp], "sum").T  # sim(pre_j‖hyp_i)
    # the reverse orientation sim(pre‖hyp) is told apart at the tolerances below
    assert not torch.allclose(pre_given_hyp.diagonal(), hyp_given_pre.diagonal(), rtol=1e-5, atol=0)
    assert not torch.allclose(pre_given_hyp, hyp_given_pre, rtol=1e-4, atol=0)

    assert shape == [len(premises) + len(hypotheses), 384]
    torch.testing.assert_close(
        torch.tensor(generality, dtype=torch.float64), logvar.double().sum(-1), rtol=1e-5, atol=0
    )
    torch.testing.assert_close(
        torch.tensor(entailment, dtype=torch.float64), hyp_given_pre.diagonal(), rtol=1e-5, atol=0
    )
    torch.testing.assert_close(torch.tensor(matrix, dtype=torch.float64), hyp_given_pre, rtol=1e-4, atol=0)
    assert by_similarity == (hyp_given_pre.diagonal() > pre_given_hyp.diagonal()).tolist()
    assert by_variance == (entropy(logvar[pre]) > entropy(logvar[hyp])).tolist()
    assert by_variance == [generality[i] > generality[len(premises) + i] for i in range(len(premises))]


def test_readme_sentence_transformers_example_prints_the_search_scores(minilm_gausscse, fresh_python, tmp_path):
    """On a model that states a search score (as the quickstart's), the example prints cos(μ_claim, μ_passage) −
    λ·KL(claim‖passage)/d (scikit-learn, torch.distributions, heads applied by hand) and its best passage per claim."""
    code = usage_example(1)
    assert "trust_remote_code=True" in code
    model = copy.deepcopy(minilm_gausscse)
    model.config.similarity_reduction = GaussCSEConfig().similarity_reduction
    model.config.search_kl_weight = 0.2
    claims, passages, (scores, best) = run_example(
        code, "SentenceTransformer", ("claims", "passages"), model, fresh_python, tmp_path
    )

    raw_mu, logvar = heads_by_hand(model, model.get_tokenizer(), claims + passages)
    gaussians = GaussianEmbeddings(torch.tanh(raw_mu), logvar)
    claim, passage = slice(0, len(claims)), slice(len(claims), None)
    expected = reference_search_score(gaussians[claim], gaussians[passage], 0.2, "entailing")
    torch.testing.assert_close(torch.tensor(scores, dtype=torch.float64), expected, rtol=1e-5, atol=1e-6)
    assert best == expected.argmax(dim=1).tolist()


def python_blocks() -> list[str]:
    """Every Python code block of the README, in order."""
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


@pytest.mark.parametrize("index", range(len(python_blocks())))
def test_every_readme_python_block_runs_as_written(index, minilm_gausscse, tmp_path):
    """Each Python block of the README, unchanged, as a script in a fresh process (offline), beside a saved model at
    ``outputs/quickstart`` that states λ, α and a threshold as a quickstart run's does."""
    model = copy.deepcopy(minilm_gausscse)
    model.config.search_kl_weight, model.config.entailment_cosine_weight, model.config.entailment_threshold = (
        0.1,
        2.0,
        0.3,
    )
    model.save_pretrained(tmp_path / "outputs" / "quickstart")
    model.get_tokenizer().save_pretrained(tmp_path / "outputs" / "quickstart")
    script = tmp_path / f"block_{index}.py"
    script.write_text(python_blocks()[index], encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"},
    )  # fmt: skip
    assert done.returncode == 0, f"README block {index + 1}:\n{python_blocks()[index]}\n{done.stderr[-3000:]}"
