"""The built-in NLI and STS datasets, from a local folder in the layout of ``shared/data`` (gzip JSON Lines) or the Hub:
NLI splits with string columns ``premise``, ``hypothesis`` and ``label`` in {entailment, neutral, contradiction} (plus
the file's other fields), STS splits with ``sentence1``, ``sentence2`` and a float ``score``."""

from __future__ import annotations

import os
from pathlib import Path

import datasets

NLI_LABELS = ("entailment", "neutral", "contradiction")
STS_TESTS = ("sts12", "sts13", "sts14", "sts15", "sts16")
SICK_SPLITS = {"train": "train", "validation": "trial", "test": "test"}  # split -> the file's "split" field

# (dataset, split) -> file in the local layout, plus an optional row filter (field, value)
LOCAL_FILES: dict[tuple[str, str], tuple[str, tuple[str, str] | None]] = {
    # the first 100k lines of SNLI train (~33.7k triplets); the 1 % sample snli/train_subset.jsonl.gz overlaps it
    ("snli", "train"): ("snli/train_100k.jsonl.gz", None),
    **{("snli", split): (f"snli/{split}.jsonl.gz", None) for split in ("validation", "test")},
    ("mnli", "train"): ("mnli/train_subset.jsonl.gz", None),
    # LingNLI (Parrish et al., 2021): MultiNLI-genre premises, each with an entailed, a neutral and a contradicting
    # hypothesis; its validation split keeps the pairs whose premise is in no evaluation set (an MNLI-genre dev set)
    **{("lingnli", split): (f"lingnli/{split}.jsonl.gz", None) for split in ("train", "validation")},
    **{("mnli", split): (f"mnli/{split}.jsonl.gz", None) for split in ("validation_matched", "validation_mismatched")},
    **{("sick", split): ("sick/sick.jsonl.gz", ("split", part)) for split, part in SICK_SPLITS.items()},
    **{(name, "test"): (f"sts/{name}.jsonl.gz", None) for name in STS_TESTS},
    **{("stsb", split): (f"sts/stsb_{split}.jsonl.gz", None) for split in ("train", "validation", "test")},
    ("sickr", "test"): ("sts/sick_r.jsonl.gz", None),
}
# dataset -> (Hub id, config): each split of LOCAL_FILES is the Hub split of the same name. SICK: the SemEval-2014
# splits of the full SICK.txt the local copy was made from; STS as MTEB packages it (sentence1, sentence2, score 0-5).
HUB_DATASETS: dict[str, tuple[str, str | None]] = {
    "snli": ("stanfordnlp/snli", None),
    "mnli": ("nyu-mll/glue", "mnli"),
    "sick": ("RobZamp/sick", None),
    **{name: (f"mteb/{name}-sts", None) for name in STS_TESTS},
    "stsb": ("mteb/stsbenchmark-sts", None),
    "sickr": ("mteb/sickr-sts", None),
}
# (dataset, split) -> (Hub id, config, Hub split): the one source of the datasets' Hub ids (the model card's too)
HUB_SOURCES = {(name, split): (*HUB_DATASETS[name], split) for name, split in LOCAL_FILES if name in HUB_DATASETS}
# datasets with no Hub copy: read from a local folder only (LingNLI is published as files in its authors' repository)
LOCAL_ONLY = {"lingnli": "https://github.com/Alicia-Parrish/ling_in_loop"}
# RobZamp/sick holds a loading script, which datasets >= 4 refuses to run; its parquet export loads.
HUB_REVISIONS = {"RobZamp/sick": "refs/convert/parquet"}
# Hub NLI columns -> the local layout's
HUB_COLUMNS = {"sentence1": "premise", "sentence2": "hypothesis", "sentence_A": "premise", "sentence_B": "hypothesis"}


def default_data_dir() -> Path | None:
    """``$GAUSSCSE_DATA_DIR``, else ``shared/data`` beside or inside the checkout (or the current folder), else
    ``None`` (use the Hub)."""
    if env := os.environ.get("GAUSSCSE_DATA_DIR"):
        return Path(env)
    checkout = Path(__file__).resolve().parents[2]
    for root in dict.fromkeys((checkout, Path.cwd())):
        for candidate in (root.parent / "shared" / "data", root / "shared" / "data"):
            if candidate.is_dir():
                return candidate
    return None


def load_split(name: str, split: str, data_dir: str | Path | None = None) -> datasets.Dataset:
    """One split of a dataset of ``LOCAL_FILES`` (``snli``/``train``, ``sts12``/``test``, ...) from ``data_dir``
    (default [`default_data_dir`]), or from the Hub (``HUB_SOURCES``) where there is no local folder."""
    if (name, split) not in LOCAL_FILES:
        known = ", ".join(f"{n}/{s}" for n, s in LOCAL_FILES)
        raise ValueError(f"Unknown dataset split {name}/{split}; known: {known}")
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    if data_dir is None and name in LOCAL_ONLY:
        raise FileNotFoundError(
            f"{name}/{split} is local only (no Hub copy; the files come from {LOCAL_ONLY[name]}): pass --data_dir or "
            f"set GAUSSCSE_DATA_DIR to a folder holding {LOCAL_FILES[(name, split)][0]}"
        )
    if data_dir is None:
        hub_id, config, hub_split = HUB_SOURCES[(name, split)]
        try:
            dataset = datasets.load_dataset(hub_id, config, split=hub_split, revision=HUB_REVISIONS.get(hub_id))
        except Exception as error:  # offline, no such dataset, a network error: datasets raises many types
            looked = "$GAUSSCSE_DATA_DIR, shared/data beside the checkout or in the current folder"
            raise FileNotFoundError(
                f"{name}/{split}: no local data folder ({looked}) and the Hub's {hub_id} could not be loaded "
                f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}): pass --data_dir"
            ) from error
        if "score" in dataset.column_names:  # STS: already sentence1 / sentence2 / score
            return dataset
        renames = {hub: local for hub, local in HUB_COLUMNS.items() if hub in dataset.column_names}
        if renames:
            dataset = dataset.rename_columns(renames)
        dataset = dataset.map(lambda row: {"label": NLI_LABELS[row["label"]] if row["label"] in (0, 1, 2) else "-"})
        return dataset.filter(lambda row: row["label"] != "-")
    relative_path, row_filter = LOCAL_FILES[(name, split)]
    path = data_dir / relative_path
    if not path.is_file():
        raise FileNotFoundError(f"{name}/{split}: expected the file {path} (gzip JSON Lines) in --data_dir {data_dir}")
    dataset = datasets.load_dataset("json", data_files=str(path), split="train")
    if row_filter is not None:
        field, value = row_filter
        dataset = dataset.filter(lambda example: example[field] == value)
    return dataset
