"""The model card (``README.md`` with YAML metadata) written next to a trained GaussCSE model."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

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
        "base_model": base_model,
        "datasets": [DATASET_IDS.get(name, name) for name in datasets],
        "license": "apache-2.0",
    }
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
    adapter: bool = False,
) -> str:
    """The full ``README.md`` text; ``adapter``: the folder holds a LoRA adapter + heads, not full weights."""
    front_matter = yaml.safe_dump(card_metadata(model_name, base_model, datasets, metrics), sort_keys=False)
    metric_rows = "\n".join(f"| {key} | {value:.4f} |" for key, value in metrics.items())
    arguments = json.dumps(dict(training_arguments), indent=2, sort_keys=True, default=str)
    stats = json.dumps(dict(data_stats), indent=2, default=str)
    return f"""---
{front_matter}---

# {model_name}

A [GaussCSE](https://aclanthology.org/2024.eacl-short.36/) model fine-tuned from `{base_model}`: each sentence
becomes a diagonal Gaussian N(μ, σ²) and sim(a‖b) = 1 / (1 + KL(N_a‖N_b)) is asymmetric. An entailed hypothesis
is scored sim(hyp‖pre); the entailing (more general) sentence has the larger variance.

## Usage

```python
{(ADAPTER_LOADING if adapter else FULL_LOADING).format(name=model_name)}
premises = ["A man is playing a guitar on stage."]
hypotheses = ["A man is playing music."]
print(model.entailment_score(premises, hypotheses))      # sim(hyp‖pre)
print(model.entailment_direction(premises, hypotheses).by_similarity)
embeddings = model.encode(premises)                      # .mu, .logvar
```

## Evaluation (final model)

| metric | value |
|---|---:|
{metric_rows}

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
    path.write_text(render_model_card(**kwargs), encoding="utf-8")
    return path


__all__ = ["card_metadata", "render_model_card", "write_model_card"]
