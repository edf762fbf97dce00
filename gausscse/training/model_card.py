"""The model card (``README.md`` with YAML metadata) written next to a trained GaussCSE model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from gausscse.io import write_atomic
from gausscse.model.gaussian import check_reduction

DATASET_IDS = {"snli": "stanfordnlp/snli", "mnli": "nyu-mll/multi_nli", "sick": "RobZamp/sick"}

# Metric keys of the final evaluation -> (model-index metric type, human name)
CARD_METRICS = {
    "snli_dev_auprc": ("auprc", "SNLI dev binary NLI AUPRC"),
    "snli_dev_accuracy": ("accuracy", "SNLI dev binary NLI accuracy"),
    "snli_dev_direction_accuracy": ("direction_accuracy", "SNLI dev entailment direction accuracy"),
}

CITATION = """@inproceedings{yoda-etal-2024-sentence,
    title = "Sentence Representations via {G}aussian Embedding",
    author = "Yoda, Shohei and Tsukagoshi, Hayato and Sasano, Ryohei and Takeda, Koichi",
    booktitle = "Proceedings of the 18th Conference of the European Chapter of the ACL (Volume 2: Short Papers)",
    year = "2024",
    pages = "418--425",
}"""


FIGURE_FILE = "evaluation.png"  # the final evaluation's figure, saved beside the weights and shown in the card

# The sentence-transformers usage; {similarity} is the line of SIMILARITY_FROM_DOT for the model's reduction.
SENTENCE_TRANSFORMERS_USAGE = """from sentence_transformers import SentenceTransformer

st = SentenceTransformer("{name}", trust_remote_code=True)  # sentence-transformers >= 6
claims = ["A man is playing music."]
passages = ["A man is playing a guitar on stage.", "A woman is slicing a tomato."]
scores = st.similarity(st.encode_query(claims), st.encode_document(passages))  # dot = -KL(claim||passage)
{similarity}
points = st.encode(passages)  # mu: compare with cosine similarity (STS, clustering) as for any model"""
# sim(claim‖passage) from dot = −KL, per reduction, and what the card says of the routes' ranking.
SIMILARITY_FROM_DOT = {
    "sum": (
        "print(1 / (1 - scores))  # sim(claim||passage) = 1 / (1 + KL): passages entailing a claim score highest",
        "so sentence-transformers' `dot` ranks exactly as this model's similarity (`sum`, the paper's eq. 2)",
    ),
    "mean_kl": (
        "print(1 / (1 - scores / {dim}))  # sim(claim||passage) = 1 / (1 + KL/d), d = {dim}: entailing passages first",
        "so sentence-transformers' `dot` ranks exactly as this model's similarity (`mean_kl`, 1 / (1 + KL/d): "
        "monotone in the KL)",
    ),
    "mean_dim": (
        "print(1 / (1 - scores))  # 1 / (1 + KL), the sum form; this model's own mean_dim similarity: model.similarity",
        "so sentence-transformers' `dot` ranks by the total KL (the paper's `sum` form); this model's `mean_dim` "
        "reduction, mean_k 1/(1 + KL_k), is no function of it, so the routes only approximate its ranking (a warning "
        "says so when it loads), while `model.similarity` above computes it exactly",
    ),
}


def sentence_transformers_usage(name: str, reduction: str, dim: int) -> str:
    """The card's sentence-transformers snippet for a model named ``name`` with ``reduction`` and dimension ``dim``."""
    similarity = SIMILARITY_FROM_DOT[check_reduction(reduction)][0].format(dim=dim)
    return SENTENCE_TRANSFORMERS_USAGE.format(name=name, similarity=similarity)


SEARCH_USAGE = """from gausscse.search import GaussianIndex  # pip install gausscse

passages = ["A man is playing a guitar on stage.", "A woman is slicing a tomato.", "Two dogs run in the snow."]
index = GaussianIndex(model.config.embedding_size, model.config.similarity_reduction)
index.add(model.encode(passages))
scores, ids = index.entailing(model.encode(["A man is playing music."]), k=2)  # sim(claim‖passage), best first
print([passages[i] for i in ids[0]], scores[0])"""


def is_hub_id(name: str) -> bool:
    """Whether ``name`` can be a Hub repository id (a local folder's path is not one)."""
    if Path(name).exists():
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def card_metadata(
    model_name: str, base_model: str, datasets: list[str], metrics: Mapping[str, float]
) -> dict[str, Any]:
    """YAML front matter: library, tags, base model, datasets and a ``model-index`` of the final metrics."""
    results = [
        {
            "task": {"type": "natural-language-inference", "name": human},
            "dataset": {"type": "stanfordnlp/snli", "name": "SNLI", "split": "validation"},
            "metrics": [{"type": metric_type, "value": round(float(metrics[key]), 4), "name": human}],
        }
        for key, (metric_type, human) in CARD_METRICS.items()
        if key in metrics
    ]
    metadata: dict[str, Any] = {
        "library_name": "transformers",
        "pipeline_tag": "sentence-similarity",
        "tags": ["gausscse", "sentence-embeddings", "gaussian-embeddings", "natural-language-inference"],
        "datasets": [DATASET_IDS.get(name, name) for name in datasets],
        "license": "apache-2.0",
    }
    if is_hub_id(base_model):  # the Hub accepts repository ids only here
        metadata["base_model"] = base_model
    if results:
        metadata["model-index"] = [{"name": model_name, "results": results}]
    return metadata


FULL_LOADING = """from transformers import AutoModel

model = AutoModel.from_pretrained("{name}", trust_remote_code=True)"""
ADAPTER_LOADING = """from gausscse.training.lora import load_adapter_model  # pip install gausscse (needs peft)

model = load_adapter_model("{name}")  # the base encoder + this LoRA adapter + the μ/σ² heads"""


def render_model_card(
    model_name: str,
    base_model: str,
    datasets: list[str],
    metrics: Mapping[str, float],
    training_arguments: Mapping[str, Any],
    data_stats: Mapping[str, Any],
    reduction: str,
    embedding_size: int,
    adapter: bool = False,
    figure: str | None = None,
) -> str:
    """The full ``README.md`` text; ``reduction``, ``embedding_size``: the model's ``config.similarity_reduction``
    and d; ``adapter``: the folder holds a LoRA adapter + heads, not full weights; ``figure``: the file name of the
    final evaluation's figure in the folder (shown under the metrics)."""
    front_matter = yaml.safe_dump(card_metadata(model_name, base_model, datasets, metrics), sort_keys=False)
    metric_rows = "\n".join(f"| {key} | {value:.4f} |" for key, value in metrics.items())
    if metric_rows:
        evaluation = f"| metric | value |\n|---|---:|\n{metric_rows}"
    else:
        evaluation = "No evaluation ran inside training (`--eval_strategy no`); `gausscse-evaluate` scores the model."
    if figure is not None:
        evaluation += (
            f"\n\n![Precision–recall of sim(hyp‖pre) and the generality gap]({figure})\n\n"
            "Left: binary NLI, entailment vs rest, scored by sim(hyp‖pre). Right: Σlog σ²(premise) − "
            "Σlog σ²(hypothesis) on the entailment pairs; right of 0 the premise is the broader Gaussian, as the "
            "variance rule expects."
        )
    arguments = json.dumps(dict(training_arguments), indent=2, sort_keys=True, default=str)
    stats = json.dumps(dict(data_stats), indent=2, default=str)
    loading = (ADAPTER_LOADING if adapter else FULL_LOADING).format(name=model_name)
    return f"""---
{front_matter}---

# {model_name}

A [GaussCSE](https://aclanthology.org/2024.eacl-short.36/) model fine-tuned from `{base_model}`: each sentence
becomes a diagonal Gaussian N(μ, σ²) and sim(a‖b) = 1 / (1 + KL(N_a‖N_b)) is asymmetric. An entailed hypothesis
is scored sim(hyp‖pre); the entailing (more general) sentence has the larger variance.

## Usage with `transformers`

```python
{loading}
premises = ["A man is playing a guitar on stage."]
hypotheses = ["A man is playing music."]
print(model.entailment_score(premises, hypotheses))      # sim(hyp‖pre)
print(model.entailment_direction(premises, hypotheses).by_similarity)
embeddings = model.encode(premises)                      # .mu, .logvar
```

## Usage with sentence-transformers

```python
{sentence_transformers_usage(model_name, reduction, embedding_size)}
```

`encode_query` / `encode_document` give (2d + 2)-dimensional vectors whose dot product is −KL(claim‖passage),
{SIMILARITY_FROM_DOT[reduction][1]}. `encode(..., output_value=None)` gives `mu` and `logvar` per sentence.

## Entailment search

The sentences of a collection that entail a claim, exact top-k by sim(claim‖sentence) (with `model` loaded as above):

```python
{SEARCH_USAGE}
```

## Demo

The GaussCSE repository's Gradio app shows which of two sentences entails the other (with a picture of both
Gaussians), the asymmetric similarity matrix of a list of sentences, and entailment search:
`GAUSSCSE_MODEL={model_name} python app.py` runs it locally, and
`python scripts/build_space.py --model {model_name} --space_id <user>/<space>` deploys it as a Hugging Face Space
(`https://huggingface.co/spaces/<user>/<space>`).

## Evaluation (final model)

{evaluation}

## Training data

NLI sources: {", ".join(datasets)}. Examples built as (premise, entailment hypothesis, contradiction hypothesis or
none), grouped by premise:

```json
{stats}
```

## Training arguments

```json
{arguments}
```

## Citation

```bibtex
{CITATION}
```
"""


def write_model_card(output_dir: str | Path, **kwargs: Any) -> Path:
    """Write ``README.md`` (see [`render_model_card`] for the arguments) into ``output_dir``; return its path."""
    path = Path(output_dir) / "README.md"
    write_atomic(path, render_model_card(**kwargs))
    return path


__all__ = [
    "FIGURE_FILE",
    "SEARCH_USAGE",
    "SENTENCE_TRANSFORMERS_USAGE",
    "SIMILARITY_FROM_DOT",
    "card_metadata",
    "is_hub_id",
    "render_model_card",
    "sentence_transformers_usage",
    "write_model_card",
]
