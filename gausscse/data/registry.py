"""Dataset loading: a local folder in the layout of ``shared/data`` (gzip JSON Lines) or the Hub when online.

Every NLI split comes back as a ``datasets.Dataset`` with string columns ``premise``, ``hypothesis`` and
``label`` in {entailment, neutral, contradiction} (plus whatever extra fields the file has). Every STS split
comes back with ``sentence1``, ``sentence2`` and a float ``score``.
"""

from __future__ import annotations

import os
from pathlib import Path

import datasets

NLI_LABELS = ("entailment", "neutral", "contradiction")

# (dataset, split) -> file in the local layout, plus an optional row filter (field, value)
LOCAL_FILES: dict[tuple[str, str], tuple[str, tuple[str, str] | None]] = {
    # the first 100k lines of SNLI train (~33.7k triplets); the 1 % sample snli/train_subset.jsonl.gz overlaps it
    ("snli", "train"): ("snli/train_100k.jsonl.gz", None),
    ("snli", "validation"): ("snli/validation.jsonl.gz", None),
    ("snli", "test"): ("snli/test.jsonl.gz", None),
    ("mnli", "train"): ("mnli/train_subset.jsonl.gz", None),
    ("mnli", "validation_matched"): ("mnli/validation_matched.jsonl.gz", None),
    ("mnli", "validation_mismatched"): ("mnli/validation_mismatched.jsonl.gz", None),
    ("sick", "train"): ("sick/sick.jsonl.gz", ("split", "train")),
    ("sick", "validation"): ("sick/sick.jsonl.gz", ("split", "trial")),
    ("sick", "test"): ("sick/sick.jsonl.gz", ("split", "test")),
    ("sts12", "test"): ("sts/sts12.jsonl.gz", None),
    ("sts13", "test"): ("sts/sts13.jsonl.gz", None),
    ("sts14", "test"): ("sts/sts14.jsonl.gz", None),
    ("sts15", "test"): ("sts/sts15.jsonl.gz", None),
    ("sts16", "test"): ("sts/sts16.jsonl.gz", None),
    ("stsb", "train"): ("sts/stsb_train.jsonl.gz", None),
    ("stsb", "validation"): ("sts/stsb_validation.jsonl.gz", None),
    ("stsb", "test"): ("sts/stsb_test.jsonl.gz", None),
    ("sickr", "test"): ("sts/sick_r.jsonl.gz", None),
}

# (dataset, split) -> (Hub id, config name, Hub split), for users who are online and have no local copy; the one source
# of the datasets' Hub ids (the model card names the same ones). One Hub id per dataset: [`hub_dataset_id`].
HUB_SOURCES: dict[tuple[str, str], tuple[str, str | None, str]] = {
    ("snli", "train"): ("stanfordnlp/snli", None, "train"),
    ("snli", "validation"): ("stanfordnlp/snli", None, "validation"),
    ("snli", "test"): ("stanfordnlp/snli", None, "test"),
    ("mnli", "train"): ("nyu-mll/glue", "mnli", "train"),
    ("mnli", "validation_matched"): ("nyu-mll/glue", "mnli", "validation_matched"),
    ("mnli", "validation_mismatched"): ("nyu-mll/glue", "mnli", "validation_mismatched"),
    # SICK as the Hub has it: sentence_A / sentence_B, label 0/1/2, entailment_AB / entailment_BA and the SemEval-2014
    # splits (train 4,439 / trial = validation 495 / test 4,906) of the full SICK.txt the local copy was made from
    ("sick", "train"): ("RobZamp/sick", None, "train"),
    ("sick", "validation"): ("RobZamp/sick", None, "validation"),
    ("sick", "test"): ("RobZamp/sick", None, "test"),
    # STS as packaged by MTEB (columns sentence1, sentence2, score 0-5; no ``subset`` field)
    ("sts12", "test"): ("mteb/sts12-sts", None, "test"),
    ("sts13", "test"): ("mteb/sts13-sts", None, "test"),
    ("sts14", "test"): ("mteb/sts14-sts", None, "test"),
    ("sts15", "test"): ("mteb/sts15-sts", None, "test"),
    ("sts16", "test"): ("mteb/sts16-sts", None, "test"),
    ("stsb", "train"): ("mteb/stsbenchmark-sts", None, "train"),
    ("stsb", "validation"): ("mteb/stsbenchmark-sts", None, "validation"),
    ("stsb", "test"): ("mteb/stsbenchmark-sts", None, "test"),
    ("sickr", "test"): ("mteb/sickr-sts", None, "test"),
}
# Hub datasets read at another revision: RobZamp/sick holds a loading script, which datasets >= 4 refuses to run; the
# Hub's parquet export of the same data loads.
HUB_REVISIONS = {"RobZamp/sick": "refs/convert/parquet"}
# Hub NLI columns -> the local layout's
HUB_NLI_COLUMNS = {
    "sentence1": "premise",
    "sentence2": "hypothesis",
    "sentence_A": "premise",
    "sentence_B": "hypothesis",
}


def hub_dataset_id(name: str) -> str | None:
    """The Hub id of a known dataset (``mnli`` → ``nyu-mll/glue``; the same for all its splits), ``None`` for a name
    the registry has no Hub source for."""
    return next((hub_id for (known, _), (hub_id, _, _) in HUB_SOURCES.items() if known == name), None)


def default_data_dir() -> Path | None:
    """``$GAUSSCSE_DATA_DIR``, else ``shared/data`` beside or inside the checkout (or the current folder), else
    ``None`` (use the Hub)."""
    if env := os.environ.get("GAUSSCSE_DATA_DIR"):
        return Path(env)
    checkout = Path(__file__).resolve().parents[2]  # gausscse/data/registry.py → the repository root
    for root in dict.fromkeys((checkout, Path.cwd())):
        for candidate in (root.parent / "shared" / "data", root / "shared" / "data"):
            if candidate.is_dir():
                return candidate
    return None


def _hub_nli_to_strings(example: dict) -> dict:
    return {"label": NLI_LABELS[example["label"]] if example["label"] in (0, 1, 2) else "-"}


def load_split(name: str, split: str, data_dir: str | Path | None = None) -> datasets.Dataset:
    """Load one split of a known dataset.

    Args:
        name: ``snli``, ``mnli``, ``sick``, ``sts12``…``sts16``, ``stsb`` or ``sickr``.
        split: e.g. ``train``, ``validation``, ``test``, ``validation_matched``.
        data_dir: folder in the layout of ``shared/data``; defaults to :func:`default_data_dir`.
            With no local folder, every split comes from the Hub (``HUB_SOURCES``).
    """
    key = (name, split)
    if key not in LOCAL_FILES:
        known = ", ".join(f"{n}/{s}" for n, s in LOCAL_FILES)
        raise ValueError(f"Unknown dataset split {name}/{split}; known: {known}")
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    if data_dir is None:
        if key not in HUB_SOURCES:
            raise FileNotFoundError(
                f"{name}/{split} needs a local data folder (pass --data_dir or set GAUSSCSE_DATA_DIR)"
            )
        hub_id, config, hub_split = HUB_SOURCES[key]
        dataset = datasets.load_dataset(hub_id, config, split=hub_split, revision=HUB_REVISIONS.get(hub_id))
        if "score" in dataset.column_names:  # STS: already sentence1 / sentence2 / score
            return dataset
        renames = {hub: local for hub, local in HUB_NLI_COLUMNS.items() if hub in dataset.column_names}
        if renames:
            dataset = dataset.rename_columns(renames)
        return dataset.map(_hub_nli_to_strings).filter(lambda example: example["label"] != "-")
    relative_path, row_filter = LOCAL_FILES[key]
    path = data_dir / relative_path
    if not path.is_file():
        raise FileNotFoundError(f"{name}/{split}: expected the file {path} (gzip JSON Lines) in --data_dir {data_dir}")
    dataset = datasets.load_dataset("json", data_files=str(path), split="train")
    if row_filter is not None:
        field, value = row_filter
        dataset = dataset.filter(lambda example: example[field] == value)
    return dataset
