"""The README's usage example runs as written, in a fresh process, against a saved model folder, and prints the
numbers an independent computation gives."""

import ast
import re
from pathlib import Path

import torch

from .helpers import entropy, heads_by_hand, reference_similarity

README = Path(__file__).resolve().parent.parent / "README.md"


def usage_example() -> str:
    section = README.read_text().split("## Usage", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


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
    folder = re.search(r'AutoModel\.from_pretrained\("([^"]+)"', code).group(1)
    premises = ast.literal_eval(re.search(r"^premises = (\[.*\])$", code, re.M).group(1))
    hypotheses = ast.literal_eval(re.search(r"^hypotheses = (\[.*\])$", code, re.M).group(1))
    minilm_gausscse.save_pretrained(tmp_path / folder)
    minilm_gausscse.get_tokenizer().save_pretrained(tmp_path / folder)
    # print every digit float32 holds; the example itself runs unchanged
    output = fresh_python("import torch\ntorch.set_printoptions(precision=10)\n" + code, cwd=tmp_path)
    shape, generality, entailment, matrix, by_similarity, by_variance = printed_tensors(output)

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
