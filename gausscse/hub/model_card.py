"""The model card (``README.md``: YAML metadata + ``model_card_template.md``) of a GaussCSE model folder, shaped as a
sentence-transformers model's. The metadata holds Hub ids only (a local backbone or dataset is left out, a file is
named by its base name) and a ``model-index`` that ``gausscse-evaluate`` adds its results to."""

from __future__ import annotations

import contextlib
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
from gausscse.data.registry import HUB_DATASETS, HUB_SOURCES, LOCAL_ONLY
from gausscse.data.sources import TRAIN_SOURCES
from gausscse.io import write_atomic
from gausscse.loading import is_hub_id, valid_repo_id
from gausscse.model.gaussian import check_reduction

TEMPLATE = Path(__file__).with_name("model_card_template.md")
TAGS = ["sentence-transformers", "sentence-similarity", "feature-extraction", "gausscse", "gaussian-embeddings",
        "natural-language-inference"]  # fmt: skip
FIGURE_FILE = "evaluation.png"  # the final evaluation's figure, saved beside the weights and shown in the card
EXAMPLE_CLAIM = "A man is playing music."  # the snippets' example; the first passage entails it
EXAMPLE_PASSAGES = ["A man is playing a guitar on stage.", "A woman is slicing a tomato.", "Two dogs run in the snow."]
LOADING_CALL = re.compile(r"""(?:SentenceTransformer|from_pretrained)\(\s*["']([^"']+)["']""")
FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)
EVALUATION_HEADING = "## Evaluation"
TASKS = {  # model-index task type -> its name
    "binary-classification": "Binary NLI: entailment vs neutral + contradiction, scored by sim(hyp‖pre)",
    "entailment-direction": "Entailment direction: which sentence of an entailment pair is the premise",
    "semantic-similarity": "Semantic textual similarity (Spearman ρ × 100)",
    "information-retrieval": "Entailment retrieval: the premises that entail a claim",
}
METRIC_NAMES = {  # metric type -> its name; values are percentages except thresholds
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
# retrieval metric types: <score>_<metric>
RETRIEVAL_SCORES = {"search": "cos(μ) − λ·KL/d", "similarity": "sim(claim‖premise)", "cosine": "cos(μ)"}
# the dev evaluator's metrics (without the set prefix) -> (task type, metric type); any other: binary NLI, as named
DEV_METRICS = {"direction_accuracy": ("entailment-direction", "similarity_rule")}
# the snippet's line giving sim(claim‖passage) from dot = −KL, per reduction
SIMILARITY_FROM_DOT = {
    "sum": "print(1 / (1 - scores))  # sim(claim||passage) = 1 / (1 + KL): passages entailing a claim score highest",
    "mean_kl": "print(1 / (1 - scores / {dim}))  # sim(claim||passage) = 1 / (1 + KL/d), d = {dim}: entailing passages "
    "first",
    "mean_dim": "print(1 / (1 - scores))  # 1 / (1 + KL), the sum form; this model's own mean_dim similarity: "
    "model.similarity",
}


def sentence_transformers_usage(name: str, reduction: str, dim: int, search_kl_weight: float | None = None) -> str:
    """The card's sentence-transformers snippet for the model ``name`` (search score λ ``search_kl_weight``; ``None``:
    the routes give −KL)."""
    if search_kl_weight is None:
        similarity = SIMILARITY_FROM_DOT[check_reduction(reduction)].format(dim=dim)
        comment = "dot = -KL(claim||passage)"
    else:
        weight, comment = f"{search_kl_weight:g}", "dot = the model's search score"
        similarity = (
            f"print(scores)  # cos(mu_claim, mu_passage) - {weight} * KL(claim||passage) / d: entailing passages first"
        )
    return f"""from sentence_transformers import SentenceTransformer

st = SentenceTransformer("{name}", trust_remote_code=True)  # sentence-transformers >= 6
claims = {json.dumps([EXAMPLE_CLAIM])}
passages = {json.dumps(EXAMPLE_PASSAGES)}
scores = st.similarity(st.encode_query(claims), st.encode_document(passages))  # {comment}
{similarity}
points = st.encode(passages)  # mu: compare with cosine similarity (STS, clustering) as for any model"""


def base_model_id(name_or_path: str) -> str | None:
    """The card's ``base_model``: a Hub id as given, the id of a local copy of a Hub model, else ``None``. A copy is a
    Hugging Face cache snapshot (``…/models--org--name/snapshots/<sha>``) or a folder whose ``README.md`` loads one
    ``org/name`` in every usage snippet and is titled ``# name`` or ``# org/name``."""
    if is_hub_id(name_or_path):
        return name_or_path
    folder = Path(name_or_path)
    if not folder.is_dir():
        return None
    snapshot = re.search(r"(?:^|/)models--([^/]+)/snapshots/[^/]", folder.resolve().as_posix())
    hub_id = snapshot.group(1).replace("--", "/") if snapshot else ""  # a Hub id cannot hold "--"
    if valid_repo_id(hub_id):
        return hub_id
    readme = folder / "README.md"
    body = FRONT_MATTER.sub("", readme.read_text(encoding="utf-8", errors="replace")) if readme.is_file() else ""
    loaded, title = set(LOADING_CALL.findall(body)), re.search(r"^# (.+)$", body, re.M)
    if len(loaded) != 1 or title is None:
        return None
    (hub_id,) = loaded
    named = title.group(1).strip() in (hub_id, hub_id.split("/")[-1])
    return hub_id if named and "/" in hub_id and valid_repo_id(hub_id) else None


def dataset_id(name: str) -> str | None:
    """The Hub id of a training source: a built-in's from the registry, a Hub id as given, ``None`` for a local one."""
    if name in TRAIN_SOURCES:
        return HUB_DATASETS[name][0] if name in HUB_DATASETS else None
    return name if is_hub_id(name) else None


def local_name(location: str) -> str:
    """A data location as the card may show it: a local file or folder by its base name, anything else as given."""
    path = Path(location)
    return path.name if path.is_absolute() or path.exists() else location


def metric_name(metric_type: str) -> str:
    """The human name of a model-index metric type (a retrieval one: ``<score>_<metric>``, e.g. ``cosine_ndcg@10``)."""
    if metric_type in METRIC_NAMES:
        return METRIC_NAMES[metric_type]
    score, _, metric = metric_type.partition("_")
    return f"{metric} ranked by {RETRIEVAL_SCORES[score]}" if score in RETRIEVAL_SCORES else metric_type


@dataclass(frozen=True)
class CardDataset:
    """A dataset split as the model-index names it (``id``: a Hub id or an own file's name; ``name``: as shown)."""

    id: str
    name: str
    split: str
    config: str | None = None


def hub_dataset(name: str, split: str) -> CardDataset:
    """A registry dataset's split (``snli``/``test``) as the Hub has it."""
    hub_id, config, hub_split = HUB_SOURCES.get((name, split), (HUB_DATASETS.get(name, (name,))[0], None, split))
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
    """The dev evaluator's metrics on ``dataset`` (see ``DEV_METRICS``)."""
    pairs = ((DEV_METRICS.get(key, ("binary-classification", key)), value) for key, value in metrics.items())
    return [eval_result(task, dataset, metric_type, value) for (task, metric_type), value in pairs]


def evaluation_section(results: Sequence[EvalResult]) -> str:
    """The card's evaluation section: the model-index as Markdown tables (per task, its datasets by metric types, then
    their names), or how to get some."""
    if not results:
        return (
            f"{EVALUATION_HEADING}\n\nNo evaluation ran inside training (`--eval_strategy no`); "
            "`gausscse-evaluate --model <this folder> --output <folder>` scores the model and writes its test results "
            "here and into the metadata."
        )
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
        header = [f"### {task_results[0].task_name or task}", "", f"| dataset | split | {' | '.join(columns)} |"]
        legend_lines = [f"\n{legend}."] if legend else []
        sections.append("\n".join([*header, "|---|---|" + "---:|" * len(columns), *rows, *legend_lines]))
    return (
        f"{EVALUATION_HEADING}\n\nEvery metric of the metadata's `model-index`, in percent except thresholds: the "
        "training's final evaluation on its dev set and, once `gausscse-evaluate --model <this folder>` has scored "
        "the model, its test results.\n\n" + "\n\n".join(sections)
    )


def with_section(text: str, heading: str, section: str) -> str:
    """``text`` with its section under the line ``heading`` (up to the next ``## `` heading) replaced by ``section``,
    or ``section`` appended where it has none."""
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.M | re.S)
    if pattern.search(text) is None:
        return f"{text.rstrip()}\n\n{section}\n"
    return pattern.sub(lambda _: f"{section}\n\n", text, count=1).rstrip("\n") + "\n"  # as appended, when last


def setting(value: Any) -> str:
    """A training setting as the card writes it: yes/no, a float in its shortest form, anything else as text."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:g}" if isinstance(value, float) else str(value)


def training_setup(arguments: Mapping[str, Any], reduction: str) -> dict[str, str]:
    """The training-setup table (setting → value) from the run's ``arguments`` (its model, data and training arguments,
    ``world_size``, ``retrieval_weight``) and the model's ``reduction``: the objective, optimisation and data settings
    only, never a token, path, tracking or logging field. Missing settings and unused options (0, off) are left out."""
    given = {name: value for name, value in arguments.items() if value is not None}
    get = given.get
    steps, processes, warmup = get("max_steps", -1), get("world_size", 1), get("warmup_steps")
    precision = "bf16 mixed" if get("bf16") else "fp16 mixed" if get("fp16") else "fp32"
    accumulation = get("gradient_accumulation_steps", 1)
    best = get("load_best_model_at_end") and get("metric_for_best_model")
    kept = f"the checkpoint with the best {best}" if best else "the last step's"
    merged = "merged into the encoder" if get("merge_lora") else "saved as an adapter"
    lora = f"r = {get('lora_r')}, α = {setting(get('lora_alpha'))}, dropout = {setting(get('lora_dropout'))}, {merged}"
    setup = {
        "loss": get("loss"),
        "temperature τ": get("temperature"),
        "similarity reduction": reduction,
        "retrieval term weight": get("retrieval_weight"),
        "keep term weight": get("keep_weight") or None,
        "auxiliary SimCSE term weight": get("simcse_weight") or None,
        "start": get("start"),
        "log σ² from a trained copy of the encoder's top layers": get("variance_layers") or None,
        "pooling": get("pooling"),
        "frozen μ path": get("frozen_mean"),
        "μ learns in the encoder's top layers": get("mean_layers") or None,
        "GaussCSE term's gradient into μ": get("kl_mean_gradient") if get("kl_mean_gradient", 1.0) != 1.0 else None,
        "frozen encoder (heads only)": get("freeze_backbone") or None,
        "LoRA": lora if get("lora_r", 0) > 0 else None,
        "max steps": steps if steps > 0 else None,
        "epochs": None if steps > 0 else get("num_train_epochs"),
        "batch size": get("per_device_train_batch_size"),
        "gradient accumulation steps": accumulation if accumulation > 1 else None,
        "learning rate (encoder)": get("learning_rate"),
        "learning rate (heads)": get("head_learning_rate", get("learning_rate")),
        "warm-up": None if warmup is None else f"{warmup:.0%} of the steps" if warmup < 1 else f"{int(warmup)} steps",
        "learning-rate schedule": get("lr_scheduler_type"),
        "weight decay": get("weight_decay"),
        "max_seq_length": get("max_seq_length"),
        "sequence packing": get("pack_sequences") or None,
        "precision": precision if "bf16" in given or "fp16" in given else None,
        "seed": get("seed"),
        "weights kept": kept if "load_best_model_at_end" in given else None,
    }
    if processes > 1:
        setup["batch size"] = f"{setup['batch size']} per process × {processes} processes"
    return {name: setting(value) for name, value in setup.items() if value is not None}


def card_sources(datasets: Sequence[str], train_files: Sequence[str]) -> str:
    """The card's training-data line: Hub datasets linked by id, local ones and own files by their base names."""
    sources = []
    for name in datasets:
        hub_id = dataset_id(name)
        link = f"[{hub_id}](https://huggingface.co/datasets/{hub_id})"
        if name in LOCAL_ONLY:  # no Hub copy: its authors' files
            sources.append(f"{name} ([{LOCAL_ONLY[name]}]({LOCAL_ONLY[name]}), local files)")
            continue
        sources.append(local_name(name) if hub_id is None else link if hub_id == name else f"{name} ({link})")
    sources += [f"`{Path(path).name}` (own file)" for path in train_files]
    return ", ".join(sources) or "not recorded"


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
    entailment_cosine_weight: float | None = None,
    entailment_threshold: float | None = None,
    load_name: str | None = None,
    alpha_at_grid_top: bool = False,
) -> str:
    """The ``README.md`` text of a model folder: ``model_name`` (Hub repo id or folder name) titles it, ``load_name``
    (the Hub repo id, or the folder's path as the run was given it; default ``model_name``) is what the snippets load
    (``alpha_at_grid_top``: α is the top of the grid it was chosen from, which the card says);
    ``base_model`` is ``--model_name_or_path``; ``datasets`` the built-in and Hub sources trained on; ``metrics`` the
    training's final dev metrics (``snli_dev_auprc``, ...); ``training_arguments`` the run's arguments (``train_file``,
    ``validation_file``, ``eval_max_examples`` too); ``data_stats`` is ``DataStats.as_dict()``; ``reduction``,
    ``embedding_size``, ``search_kl_weight`` (λ or ``None``) and the entailment score's ``entailment_cosine_weight``
    (α) and ``entailment_threshold`` are the model config's; ``adapter``: the folder holds a
    LoRA adapter and the heads; ``figure``: the file name of the final evaluation's figure in the folder."""
    file, count = training_arguments.get("validation_file"), training_arguments.get("eval_max_examples")
    if file:
        prefix, dataset = "validation_", CardDataset(Path(file).name, Path(file).name, "validation")
    else:
        prefix, dataset = "snli_dev_", hub_dataset("snli", "validation")
    if count is not None:  # the training's dev set: its first eval_max_examples pairs
        dataset = replace(dataset, name=f"{dataset.name} (first {count} pairs)", split=f"{dataset.split}[:{count}]")
    dev_scores = {key.removeprefix(prefix): value for key, value in metrics.items() if key.startswith(prefix)}
    results = dev_eval_results(dev_scores, dataset)  # not the epoch, runtime, ... the Trainer adds
    data_rows = [(key.replace("_", " "), value) for key, value in data_stats.items() if key != "per_source"]
    data_rows += [(f"rows from {local_name(source)}", n) for source, n in data_stats.get("per_source", {}).items()]
    versions = {"gausscse": __version__, "Python": platform.python_version()}
    for package in ("torch", "transformers", "sentence-transformers", "tokenizers", *(("peft",) if adapter else ())):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):  # the installed ones
            versions[package] = importlib.metadata.version(package)
    base_id = base_model_id(base_model)
    metadata = ModelCardData(
        language="en",
        license="apache-2.0",
        library_name="sentence-transformers",
        pipeline_tag="sentence-similarity",
        tags=TAGS,
        base_model=base_id,
        datasets=list(dict.fromkeys(filter(None, map(dataset_id, datasets)))) or None,
        model_name=model_name if results else None,  # the model-index's name; no such field without one
        eval_results=results or None,
    )
    load_name = load_name or model_name
    card = ModelCard.from_template(
        metadata,
        template_path=str(TEMPLATE),
        model_name=model_name,
        load_name=load_name,
        base_id=base_id,
        adapter=adapter,
        st_usage=sentence_transformers_usage(load_name, reduction, embedding_size, search_kl_weight),
        reduction=reduction,
        weight=None if search_kl_weight is None else f"{search_kl_weight:g}",
        alpha=f"{entailment_cosine_weight:g}" if entailment_cosine_weight else None,
        alpha_at_grid_top=alpha_at_grid_top,
        threshold=None if entailment_threshold is None else f"{entailment_threshold:g}",
        passages=json.dumps(EXAMPLE_PASSAGES),
        claims=json.dumps([EXAMPLE_CLAIM]),
        evaluation=evaluation_section(results),
        figure=figure,
        sources=card_sources(datasets, training_arguments.get("train_file") or ()),
        data_rows=data_rows,
        setup=training_setup(training_arguments, reduction),
        versions=versions,
    )
    return str(card)


def write_model_card(output_dir: str | Path, **kwargs: Any) -> None:
    """Write ``README.md`` ([`render_model_card`] of ``kwargs``) into ``output_dir`` atomically."""
    write_atomic(Path(output_dir) / "README.md", render_model_card(**kwargs))


def merge_test_results(card_text: str, results: Sequence[EvalResult]) -> str:
    """``card_text`` with ``results`` merged into its ``model-index`` (named by the card's title if it had none; each
    replaces an earlier value of the same metric, task and dataset split) and its evaluation section rewritten."""
    card = ModelCard(card_text)
    new = {(result.unique_identifier, result.metric_type) for result in results}
    kept = [old for old in card.data.eval_results or () if (old.unique_identifier, old.metric_type) not in new]
    card.data.eval_results = [*kept, *results]
    card.data.model_name = card.data.model_name or re.search(r"^# (.+)$", card.text, re.M).group(1)  # the title
    card.text = with_section(card.text, EVALUATION_HEADING, evaluation_section(card.data.eval_results))
    return str(card)


def update_model_card(folder: str | Path, results: Sequence[EvalResult]) -> bool:
    """Merge ``results`` into the card of the local GaussCSE model folder ``folder`` ([`merge_test_results`], written
    atomically); ``False``, and nothing touched, where it has no GaussCSE card (a Hub id, a baseline's folder)."""
    readme = Path(folder) / "README.md"
    if not readme.is_file():
        return False
    text = readme.read_text(encoding="utf-8")
    if "gausscse" not in (ModelCard(text).data.tags or ()):
        return False
    write_atomic(readme, merge_test_results(text, results))
    return True
