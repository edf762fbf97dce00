"""Training data from anywhere: file formats × shapes, integer labels, the Hub (mocked), column detection and
overrides, errors that name the file, tokenisation once per example, padding/packing from token ids."""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import datasets
import pandas as pd
import pytest
import torch
import transformers
from tokenizers import normalizers
from torch.utils.data import DataLoader
from transformers import AutoConfig, AutoTokenizer

from gausscse.data.registry import load_split
from gausscse.data.sources import (
    BadRowError,
    DataError,
    DataSpec,
    build_examples,
    load_file_source,
    load_source,
    load_training_examples,
    normalize_label,
    parse_column_overrides,
    parse_repeats,
    read_table,
    resolve_shape,
)
from gausscse.data.tokenize import text_id, tokenize_examples, tokenizer_fingerprint
from gausscse.training.arguments import DataArguments
from gausscse.training.batch import TripletCollator, text_batch_layout

from ..helpers import MINILM_PATH, nli_rows, write_jsonl_gz

NLI = [
    {"premise": "A man plays a guitar.", "hypothesis": "A man plays music.", "label": "entailment"},
    {"premise": "A man plays a guitar.", "hypothesis": "A man sleeps.", "label": "contradiction"},
    {"premise": "A man plays a guitar.", "hypothesis": "A man is famous.", "label": "neutral"},
    {"premise": "Two dogs run.", "hypothesis": "Animals move.", "label": "entailment"},
]
NLI_EXAMPLES = [
    ("A man plays a guitar.", "A man plays music.", "A man sleeps."),
    ("Two dogs run.", "Animals move.", None),
]
TRIPLETS = [
    {"anchor": "A chef cooks.", "positive": "Someone cooks.", "negative": "Nobody cooks."},
    {"anchor": "Kids swim.", "positive": "Children are in water.", "negative": "Kids sleep."},
]
PAIRS = [{"anchor": row["anchor"], "positive": row["positive"]} for row in TRIPLETS]
SHAPES = {
    "nli": (NLI, NLI_EXAMPLES),
    "triplet": (TRIPLETS, [tuple(row.values()) for row in TRIPLETS]),
    "pair": (PAIRS, [(*row.values(), None) for row in PAIRS]),
}


def write_table(path: Path, rows: list[dict]) -> Path:
    """Write rows in the format named by the path's suffixes (pandas/json: independent of the reader)."""
    frame = pd.DataFrame(rows)
    suffixes = path.suffixes
    compression = "gzip" if suffixes[-1] == ".gz" else None
    kind = suffixes[-2] if compression else suffixes[-1]
    if kind == ".csv":
        frame.to_csv(path, index=False, compression=compression)
    elif kind == ".tsv":
        frame.to_csv(path, index=False, sep="\t", compression=compression)
    elif kind == ".jsonl":
        frame.to_json(path, orient="records", lines=True, compression=compression)
    elif kind == ".json":  # one JSON array of objects
        text = json.dumps(rows)
        path.write_bytes(gzip.compress(text.encode()) if compression else text.encode())
    elif kind == ".parquet":
        frame.to_parquet(path, index=False)
    return path


def examples_of(dataset: datasets.Dataset) -> list[tuple]:
    return list(zip(dataset["premise"], dataset["entailment"], dataset["contradiction"], strict=True))


# ------------------------------------------------------------------------------------------- formats and shapes


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize(
    "suffix", [".csv", ".tsv", ".json", ".jsonl", ".parquet", ".csv.gz", ".tsv.gz", ".json.gz", ".jsonl.gz"]
)
def test_every_file_format_and_shape_builds_the_expected_examples(tmp_path, suffix, shape):
    rows, expected = SHAPES[shape]
    path = write_table(tmp_path / f"train{suffix}", rows)
    source = load_file_source(path)
    assert source.shape == shape
    dataset, stats = build_examples([source])
    assert examples_of(dataset) == expected
    assert stats.rows == len(rows) and stats.complete_triplets == sum(e[2] is not None for e in expected)


def test_integer_labels_and_unlabelled_rows(tmp_path):
    ids = {"entailment": 0, "neutral": 1, "contradiction": 2}
    rows = [{**row, "label": ids[row["label"]]} for row in NLI] + [
        {"premise": "Two dogs run.", "hypothesis": "Dogs sleep.", "label": -1}
    ]
    dataset, stats = build_examples([load_file_source(write_table(tmp_path / "nli.jsonl", rows))])
    assert examples_of(dataset) == NLI_EXAMPLES and stats.unlabelled_rows == 1 and stats.neutral_rows == 1
    assert [normalize_label(value) for value in (0, 1, 2, " Entailment ", "-", -1)] == [
        "entailment",
        "neutral",
        "contradiction",
        "entailment",
        None,
        None,
    ]
    for bad in (3, "entails", True, None):
        with pytest.raises(ValueError, match="unknown label"):
            normalize_label(bad)


def test_simcse_column_names_and_overrides(tmp_path):
    simcse = [{"sent0": r["anchor"], "sent1": r["positive"], "hard_neg": r["negative"]} for r in TRIPLETS]
    source = load_file_source(write_table(tmp_path / "nli_for_simcse.csv", simcse))
    assert (source.shape, source.columns) == (
        "triplet",
        {"anchor": "sent0", "positive": "sent1", "negative": "hard_neg"},
    )
    sick_like = [{"sentence_A": r["premise"], "sentence_B": r["hypothesis"], "gold": r["label"]} for r in NLI]
    path = write_table(tmp_path / "sick.tsv", sick_like)
    with pytest.raises(DataError, match=r"sick.tsv: cannot tell .*/label \(NLI rows\).* \(pairs\).*sentence_A"):
        load_file_source(path)
    overrides = parse_column_overrides(["premise=sentence_A", "hypothesis=sentence_B", "label=gold"])
    dataset, _ = build_examples([load_file_source(path, columns=overrides)])
    assert examples_of(dataset) == NLI_EXAMPLES
    # a forced shape uses only its roles: triplets read as pairs
    pairs, _ = build_examples([load_file_source(tmp_path / "nli_for_simcse.csv", shape="pair")])
    assert examples_of(pairs) == SHAPES["pair"][1]
    with pytest.raises(DataError, match=r"missing column\(s\) for the triplet shape: negative.*--columns role=name"):
        resolve_shape(["anchor", "positive"], "x.csv", "triplet")
    with pytest.raises(DataError, match="role=name"):
        parse_column_overrides(["premise"])
    with pytest.raises(DataError, match="Unknown column role"):
        resolve_shape(["a"], "x.csv", columns={"sentence": "a"})


def test_sources_concatenate_and_repeats_count_once(tmp_path, data_dir):
    nli = write_table(tmp_path / "nli.csv", NLI + NLI[:1])  # one repeated row
    triplets = write_table(tmp_path / "triplets.jsonl", TRIPLETS + TRIPLETS[:1])  # one repeated example
    spec = DataSpec(train_datasets=["snli"], train_files=[str(nli), str(triplets)], data_dir=data_dir)
    dataset, stats = load_training_examples(spec)
    built = examples_of(dataset)
    assert built[-4:] == [NLI_EXAMPLES[0], NLI_EXAMPLES[1], *SHAPES["triplet"][1]]
    assert len(built) == len(set(built)) == 24 + 4 and stats.duplicate_rows == 2
    assert stats.per_source == {str(data_dir / "snli/train_100k.jsonl.gz"): 72, str(nli): 5, str(triplets): 3}


def test_examples_grouped_by_premise_keep_missing_contradictions(data_dir):
    dataset, stats = build_examples([load_source("snli", data_dir), load_source("mnli", data_dir)])
    assert stats.examples == 40 and stats.complete_triplets == 24 and stats.entailment_only == 16
    assert stats.neutral_rows == 40
    first = dataset[0]
    assert first["entailment"] == "a man is outside" and first["contradiction"].startswith("nobody")
    assert dataset[39]["contradiction"] is None


def test_contradictions_cycle_over_the_entailments_of_a_premise(tmp_path):
    rows = [
        {"premise": "p", "hypothesis": "e1", "label": "entailment"},
        {"premise": "p", "hypothesis": "c1", "label": "contradiction"},
        {"premise": "p", "hypothesis": "e2", "label": "entailment"},
        {"premise": "p", "hypothesis": "e3", "label": "entailment"},
        {"premise": "p", "hypothesis": "c2", "label": "contradiction"},
        {"premise": "q", "hypothesis": "c3", "label": "contradiction"},
    ]
    write_jsonl_gz(tmp_path / "snli/train_100k.jsonl.gz", rows)
    dataset, stats = build_examples([load_source("snli", tmp_path)])
    assert dataset["contradiction"] == ["c1", "c2", "c1"] and stats.premises_without_entailment == 1


def test_offline_snli_is_the_100k_slice_of_shared_data():
    source = load_source("snli")  # ../shared/data (CI has it beside the clone)
    assert source.location.endswith("snli/train_100k.jsonl.gz") and len(source.rows) == 99_890


def test_a_cut_counts_the_examples_trained_on(data_dir):
    """--max_train_examples: the stats (train_results.json, the model card) count the examples kept, and the built."""
    from gausscse.hub.model_card import render_model_card

    dataset, stats = load_training_examples(["snli", "mnli"], data_dir=data_dir)
    assert stats.examples == 40 and stats.examples_built is None and "examples_built" not in stats.as_dict()
    kept = dataset.select(range(30))  # the snli triplets first, then 6 of mnli's entailment-only examples
    stats.cut_to(kept)
    assert (stats.examples, stats.complete_triplets, stats.entailment_only, stats.examples_built) == (30, 24, 6, 40)
    card = render_model_card(
        model_name="m", base_model="b", datasets=["snli"], metrics={}, training_arguments={},
        data_stats=stats.as_dict(), reduction="mean_kl", embedding_size=8,
    )  # fmt: skip
    assert "| examples | 30 |" in card and "| examples built | 40 |" in card


def test_a_sources_examples_are_repeated_as_asked(data_dir):
    """--train_dataset_repeats mnli=2: each MNLI example twice (up-weighted), SNLI's once; bad items are named."""
    spec = DataSpec(train_datasets=["snli", "mnli"], data_dir=data_dir, repeats=parse_repeats(["mnli=2"]))
    dataset, stats = load_training_examples(spec)
    once, _ = load_training_examples(["snli", "mnli"], data_dir=data_dir)
    built, single = examples_of(dataset), examples_of(once)
    assert stats.examples == 24 + 2 * 16 and stats.repeated_examples == 16
    assert {example: built.count(example) for example in single} == {
        example: 1 if example[2] is not None else 2
        for example in single  # mnli's examples have no contradiction
    }
    for bad in (["mnli"], ["mnli=0"], ["mnli=x"], ["=2"], ["mnli=99999999999"], ["mnli=101"]):
        with pytest.raises(DataError, match=r"--train_dataset_repeats expects name=count items with a count from 1 to"):
            parse_repeats(bad)
    assert parse_repeats(["mnli=100", " lingnli =2"]) == {"mnli": 100, "lingnli": 2}
    with pytest.raises(DataError, match=r"--train_dataset_repeats names 'mnli' twice \(mnli=2, 'mnli=3'\): once"):
        parse_repeats(["mnli=2", "mnli=3"])  # the last one won, silently
    with pytest.raises(DataError, match=r"--train_dataset_repeats names \['lingnli'\], which --train_datasets does"):
        load_training_examples(DataSpec(train_datasets=["snli"], data_dir=data_dir, repeats={"lingnli": 2}))


def test_offline_lingnli_gives_its_complete_triplets():
    """LingNLI's 44,983 pairs are 14,993 (premise, entailment, contradiction) triplets over 5,006 premises; each
    premise's k-th entailment is paired with its k-th contradiction (one of each per collection protocol)."""
    source = load_source("lingnli")  # ../shared/data
    assert source.location.endswith("lingnli/train.jsonl.gz") and source.line_numbers
    dataset, stats = build_examples([source])
    assert len(source.rows) == 44_983 and stats.neutral_rows == 14_995
    assert stats.examples == stats.complete_triplets and stats.entailment_only == 0
    rows = source.rows.to_pandas()
    entailments = rows[rows.label == "entailment"][["premise", "hypothesis"]]
    assert stats.examples == len(entailments.drop_duplicates())  # a hypothesis repeated for its premise counts once
    first = dataset[0]
    premise_rows = rows[rows.premise == first["premise"]]
    assert first["entailment"] == premise_rows[premise_rows.label == "entailment"].hypothesis.iloc[0]
    assert first["contradiction"] == premise_rows[premise_rows.label == "contradiction"].hypothesis.iloc[0]


def test_lingnli_is_a_training_source_and_local_only(tmp_path, monkeypatch):
    rows = [{**row, "protocol": "group1"} for row in nli_rows(6)]
    write_jsonl_gz(tmp_path / "lingnli/train.jsonl.gz", rows)
    _, stats = load_training_examples(["lingnli"], data_dir=tmp_path)
    assert stats.examples == stats.complete_triplets == 6
    assert DataArguments(train_datasets=["snli", "lingnli"]).train_datasets == ["snli", "lingnli"]
    monkeypatch.delenv("GAUSSCSE_DATA_DIR", raising=False)
    for module in ("registry", "sources"):  # no local folder: the Hub's
        monkeypatch.setattr(f"gausscse.data.{module}.default_data_dir", lambda: None)
    with pytest.raises(FileNotFoundError, match=r"lingnli/train is local only .*--data_dir.*lingnli/train.jsonl.gz"):
        load_source("lingnli")
    with pytest.raises(FileNotFoundError, match=r"expected the file .*lingnli/validation.jsonl.gz"):
        load_split("lingnli", "validation", tmp_path)
    offline = ConnectionError("Couldn't reach 'stanfordnlp/snli' on the Hub (LocalEntryNotFoundError)")
    with mock.patch("gausscse.data.registry.datasets.load_dataset", side_effect=offline):
        with pytest.raises(
            FileNotFoundError,
            match=r"snli/test: no local data folder \(\$GAUSSCSE_DATA_DIR, .*\) "
            r"and the Hub's stanfordnlp/snli could not be loaded \(ConnectionError: .*\): pass --data_dir",
        ):
            load_split("snli", "test")


# ------------------------------------------------------------------------------------------------------- the Hub


def test_hub_datasets_with_integer_labels_and_triplet_configs(tmp_path):
    hub = {
        ("stanfordnlp/snli", None, "train"): datasets.Dataset.from_list(
            [{**row, "label": {"entailment": 0, "neutral": 1, "contradiction": 2}[row["label"]]} for row in NLI]
        ),
        ("sentence-transformers/all-nli", "triplet", "train"): datasets.Dataset.from_list(TRIPLETS),
    }
    hub_loader = mock.patch(
        "gausscse.data.sources.datasets.load_dataset", side_effect=lambda n, c, split: hub[(n, c, split)]
    )
    with hub_loader as load:
        spec = DataSpec(
            dataset_names=["stanfordnlp/snli", "sentence-transformers/all-nli"],
            dataset_config_names=["none", "triplet"],
        )
        dataset, stats = load_training_examples(spec)
    assert load.call_count == 2
    assert examples_of(dataset) == NLI_EXAMPLES + SHAPES["triplet"][1]
    assert set(stats.per_source) == {"stanfordnlp/snli (train)", "sentence-transformers/all-nli/triplet (train)"}
    with pytest.raises(DataError, match="one value per --dataset_name"):
        DataSpec(dataset_names=["a", "b"], dataset_config_names=["x"]).load_sources()
    with (
        mock.patch("gausscse.data.sources.datasets.load_dataset", side_effect=ConnectionError("offline")),
        pytest.raises(DataError, match=r"org/missing \(train\): could not be loaded \(ConnectionError: offline\)"),
    ):
        DataSpec(dataset_names=["org/missing"]).load_sources()


# -------------------------------------------------------------------------------------------------------- errors


def test_bad_rows_stop_with_file_and_line_or_are_dropped(tmp_path):
    rows = nli_rows(3)
    rows[4] = {"premise": "a man", "hypothesis": "   ", "label": "entailment"}
    rows[6] = {"premise": "a man", "hypothesis": "x", "label": "entails"}
    path = tmp_path / "snli/train_100k.jsonl.gz"
    write_jsonl_gz(path, rows)
    with pytest.raises(BadRowError, match=rf"{path}: line 5: empty hypothesis.*--drop_bad_rows"):
        build_examples([load_source("snli", tmp_path)])
    _, stats = build_examples([load_source("snli", tmp_path)], drop_bad_rows=True)
    assert stats.bad_rows_dropped == 2 and stats.rows == 9
    rows[4] = {"premise": "a man", "label": "entailment"}
    write_jsonl_gz(path, rows)
    with pytest.raises(BadRowError, match="line 5: missing hypothesis"):
        build_examples([load_source("snli", tmp_path)])
    csv_path = write_table(tmp_path / "nli.csv", [*NLI[:2], {**NLI[2], "label": "maybe"}])
    with pytest.raises(BadRowError, match=r"nli.csv: row 2: unknown label 'maybe'"):
        build_examples([load_file_source(csv_path)])


def test_unreadable_files_are_named(tmp_path):
    good = write_table(tmp_path / "good.jsonl.gz", NLI).read_bytes()
    cases = {
        "truncated.jsonl.gz": (good[: len(good) // 2], "corrupt gzip file"),
        "plain.csv.gz": (b"premise,hypothesis,label\na,b,entailment\n", "not a gzip file.*decompress it or rename it"),
        "empty.csv": (b"", "the file is empty"),
        "garbage.parquet": (b"this is not parquet", "could not be read as PARQUET"),
        "header_only.csv": (b"premise,hypothesis,label\n", "no rows"),
        "train.txt": (b"a\tb\n", "unknown data file format"),
        "train.parquet.gz": (b"x", r"unknown data file format.*\(optionally \.gz, not for \.parquet\)"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(DataError, match=rf"{path}: .*{message}"):
            load_file_source(path)
    with pytest.raises(DataError, match="no such file"):
        load_file_source(tmp_path / "missing.csv")
    json_cases = {  # JSON the json module cannot read either: the line is named
        "broken.jsonl": (
            b'{"premise": "a", "hypothesis": "b", "label": 0}\n{"premise": "a", "hypothesis": \n',
            2,
            "not JSON",
        ),
        "array_line.jsonl": (b'{"premise": "a", "hypothesis": "b", "label": 0}\n\n[1, 2]\n', 3, "not a JSON object"),
        "broken.json": (b'[{"premise": "a",\n "hypothesis": "b" "label": 0}]', 2, "not JSON"),
    }
    for name, (content, line, message) in json_cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(DataError, match=rf"{path}, line {line}: {message}") as caught:
            load_file_source(path)
        assert "DatasetGenerationError" not in str(caught.value)
    latin_csv = tmp_path / "latin1.csv"
    latin_csv.write_bytes(b"premise,hypothesis,label\nA caf\xe9 is open.,A place is open.,entailment\n")
    with pytest.raises(DataError, match=rf"{latin_csv}, line 2: not UTF-8 text \(byte 0xe9 at column 6\); re-save"):
        load_file_source(latin_csv)
    latin_gz = tmp_path / "latin1.jsonl.gz"
    latin_gz.write_bytes(
        gzip.compress(gzip.decompress(good) + b'{"premise": "caf\xe9", "hypothesis": "b", "label": 0}\n')
    )
    with pytest.raises(DataError, match=rf"{latin_gz}, line {len(NLI) + 1}: not UTF-8 text \(byte 0xe9"):
        load_file_source(latin_gz)
    missing_column = write_table(tmp_path / "no_label.csv", [{"premise": "a", "hypothesis": "b"}])
    with pytest.raises(DataError, match=r"no_label.csv: missing column\(s\) for the nli shape: label"):
        load_file_source(missing_column, shape="nli")


NA_WORDS = ["None", "NA", "null", "nan", "N/A"]  # pandas' default NA strings: sentences like any other here


def test_tsv_cells_are_verbatim_one_row_a_line(tmp_path):
    tsv = tmp_path / "quotes.tsv"
    tsv.write_text(
        "premise\thypothesis\tlabel\n"
        '"He said\tA man spoke.\tentailment\n'  # a quote opening a cell: CSV quoting would run into the next rows
        '"Hi," she said\tShe spoke.\tcontradiction\n'
        'Two dogs run.\t"Animals" move.\t0\r\n'  # CRLF, and the Hub's integer id as text
        "\n"  # a blank line is skipped
        'A cat "sits\tA cat\rrests.\tentailment\n'  # a lone carriage return inside a cell ends no row
    )
    table = read_table(tsv)
    assert table["premise"] == ['"He said', '"Hi," she said', "Two dogs run.", 'A cat "sits']
    assert table["hypothesis"] == ["A man spoke.", "She spoke.", '"Animals" move.', "A cat\rrests."]
    assert table["label"] == ["entailment", "contradiction", "0", "entailment"]
    dataset, stats = build_examples([load_file_source(tsv)])
    assert examples_of(dataset) == [
        ('"He said', "A man spoke.", None),
        ("Two dogs run.", '"Animals" move.', None),
        ('A cat "sits', "A cat\rrests.", None),
    ]
    assert stats.rows == 4 and stats.bad_rows_dropped == 0
    gz = tmp_path / "quotes.tsv.gz"
    gz.write_bytes(gzip.compress(tsv.read_bytes()))
    assert read_table(gz)[:] == table[:]
    extra_tab = tmp_path / "extra_tab.tsv"
    extra_tab.write_text("premise\thypothesis\tlabel\na\tb\tentailment\nsaid\tx\ty\tentailment\n")
    with pytest.raises(DataError, match=rf"{extra_tab}, line 3: 4 fields, expected 3 .*a TSV cell cannot hold a tab"):
        read_table(extra_tab)


def test_csv_follows_standard_quoting_and_malformed_csv_names_the_line(tmp_path):
    csv_path = tmp_path / "quotes.csv"
    csv_path.write_text(
        "premise,hypothesis,label\n"
        '"""Hi,"" she said",She spoke.,entailment\n'
        '"Two dogs run,\nfast.",Animals move.,2\n'  # a quoted cell may hold a comma and a line break
        "Kids swim.,Children are in water.,entailment\n"
    )
    table = read_table(csv_path)
    assert table["premise"] == ['"Hi," she said', "Two dogs run,\nfast.", "Kids swim."]
    assert table["label"] == ["entailment", "2", "entailment"]
    dataset, _ = build_examples([load_file_source(csv_path)])
    assert examples_of(dataset) == [
        ('"Hi," she said', "She spoke.", None),
        ("Kids swim.", "Children are in water.", None),
    ]
    cases = {  # content -> (line named, words of the error)
        'premise,hypothesis,label\na,b,entailment\n"He said,x,entailment\nc,d,entailment\n': (3, "malformed CSV"),
        'premise,hypothesis,label\na,"b" and c,entailment\n': (2, "malformed CSV.*doubled"),
        "premise,hypothesis,label\na,b,entailment\nc,d,e,entailment\n": (3, "4 fields, expected 3"),
        "premise,hypothesis,label\na,b\n": (2, "2 fields, expected 3"),
        "premise,premise,label\na,b,entailment\n": (1, r"repeated column name\(s\) \['premise'\]"),
    }
    for number, (content, message) in enumerate(cases.items()):
        path = tmp_path / f"bad{number}.csv"
        path.write_text(content)
        with pytest.raises(DataError, match=rf"{path}, line {message[0]}: {message[1]}") as caught:
            load_file_source(path)
        assert "DatasetGenerationError" not in str(caught.value)


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".csv.gz"])
def test_na_words_are_text_and_only_empty_cells_are_missing(tmp_path, suffix):
    rows = [{"premise": f"{word} is a word.", "hypothesis": word, "label": "entailment"} for word in NA_WORDS]
    rows.append({"premise": "NA", "hypothesis": "nan", "label": "contradiction"})
    path = write_table(tmp_path / f"na{suffix}", rows)
    table = read_table(path)
    assert table["hypothesis"] == [*NA_WORDS, "nan"] and table["premise"][-1] == "NA"
    assert table.features["hypothesis"].dtype == "string"
    dataset, stats = build_examples([load_file_source(path)])
    assert examples_of(dataset) == [(f"{word} is a word.", word, None) for word in NA_WORDS]
    assert stats.rows == 6 and stats.bad_rows_dropped == 0 and stats.premises_without_entailment == 1
    # an empty cell is still missing: the row stops the build (naming file and row) or is dropped and counted
    empty = write_table(tmp_path / f"empty{suffix}", [*rows, {"premise": "A man.", "hypothesis": "", "label": "0"}])
    assert read_table(empty)["hypothesis"][-1] is None
    with pytest.raises(BadRowError, match=rf"empty{suffix}: row 6: missing hypothesis"):
        build_examples([load_file_source(empty)])
    _, stats = build_examples([load_file_source(empty)], drop_bad_rows=True)
    assert stats.bad_rows_dropped == 1 and stats.rows == 7


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_typed_formats_keep_their_nulls_and_na_words(tmp_path, suffix):
    rows = [{"premise": word, "hypothesis": f"{word}.", "label": "entailment"} for word in NA_WORDS]
    rows.append({"premise": "A man.", "hypothesis": None, "label": "entailment"})
    path = write_table(tmp_path / f"typed{suffix}", rows)
    assert read_table(path)["premise"] == [*NA_WORDS, "A man."] and read_table(path)["hypothesis"][-1] is None
    with pytest.raises(BadRowError, match=r"(line 6|row 5): missing hypothesis"):
        build_examples([load_file_source(path)])
    _, stats = build_examples([load_file_source(path)], drop_bad_rows=True)
    assert stats.bad_rows_dropped == 1 and stats.examples == 5


MIXED_LABEL_ROWS = [  # label ids and names in one column, as a file merged from two sources may hold them
    {"premise": "A man plays a guitar.", "hypothesis": "A man plays music.", "label": 0},
    {"premise": "A man plays a guitar.", "hypothesis": "A man sleeps.", "label": "contradiction"},
    {"premise": "A man plays a guitar.", "hypothesis": "A man is famous.", "label": 1},
    {"premise": "Two dogs run.", "hypothesis": "Animals move.", "label": "entailment"},
    {"premise": "Two dogs run.", "hypothesis": "Cats fly.", "label": 2},
    {"premise": "Two dogs run.", "hypothesis": "Dogs sleep.", "label": -1},
    {"premise": "Two dogs run.", "hypothesis": "Dogs nap.", "label": "-"},
]
MIXED_LABEL_EXAMPLES = [
    ("A man plays a guitar.", "A man plays music.", "A man sleeps."),
    ("Two dogs run.", "Animals move.", "Cats fly."),
]


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".json", ".json.gz", ".csv", ".tsv"])
def test_a_label_column_mixing_ids_and_names_reads_each_label(tmp_path, suffix, monkeypatch):
    """0 and "entailment" are both entailment, −1 and "-" both unlabelled, whichever the file format (Parquet cannot
    hold such a column: a column has one type)."""
    path = write_table(tmp_path / f"mixed{suffix}", MIXED_LABEL_ROWS)
    json_logger = logging.getLogger("datasets.packaged_modules.json.json")  # silenced while reading JSON
    monkeypatch.setattr(json_logger, "disabled", True)  # as a logging config may leave it: it stays so
    assert read_table(path)["label"] == ["0", "contradiction", "1", "entailment", "2", "-1", "-"]  # as a CSV holds it
    dataset, stats = build_examples([load_file_source(path)])
    assert examples_of(dataset) == MIXED_LABEL_EXAMPLES
    assert (stats.rows, stats.neutral_rows, stats.unlabelled_rows, stats.bad_rows_dropped) == (7, 1, 2, 0)
    assert json_logger.disabled
    bad = write_table(tmp_path / f"bad{suffix}", [*MIXED_LABEL_ROWS, {"premise": "p", "hypothesis": "h", "label": 3}])
    with pytest.raises(BadRowError, match=r"(line 8|row 7): unknown label '3' \(expected one of entailment"):
        build_examples([load_file_source(bad)])


@pytest.mark.parametrize("first_label", [0, "entailment"])
def test_labels_whose_type_changes_past_the_first_block_of_a_big_file(tmp_path, first_label):
    """The JSON reader reads 10 MB blocks, each column of one type: ids in the first block and names after it failed
    the read ("An error occurred while generating the dataset"); names first and a block mixing ids and names gave
    that block's names quoted ('"entailment"': "unknown label" for each)."""
    filler = " and ".join(["a man plays a red guitar in the park"] * 24)  # ~1 kB: 11,000 rows pass 10 MB
    head = [{"premise": f"{k}: {filler}", "hypothesis": f"Music {k}.", "label": first_label} for k in range(11_000)]
    tail = [
        {"premise": "Two dogs run.", "hypothesis": "Animals move.", "label": "entailment"},
        {"premise": "Two dogs run.", "hypothesis": "Cats fly.", "label": 2},
        {"premise": "Two dogs run.", "hypothesis": "Dogs sleep.", "label": "contradiction"},
        {"premise": "Two dogs run.", "hypothesis": "Pets move.", "label": 0},
    ]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in head + tail))
    assert path.stat().st_size > 10 << 20
    dataset, stats = build_examples([load_file_source(path)])
    assert stats.examples == len(head) + 2 and stats.bad_rows_dropped == 0
    assert examples_of(dataset)[-2:] == [
        ("Two dogs run.", "Animals move.", "Cats fly."),
        ("Two dogs run.", "Pets move.", "Dogs sleep."),
    ]


# -------------------------------------------------------------------------------------------------- tokenisation


class CountingTokenizer:
    """Wraps a tokenizer and counts every text it is asked to tokenize."""

    def __init__(self, tokenizer):
        self.tokenizer, self.texts = tokenizer, []
        self.name_or_path = tokenizer.name_or_path

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __call__(self, texts, **kwargs):
        self.texts.extend(texts)
        return self.tokenizer(texts, **kwargs)

    def __getstate__(self):  # its cache key is the wrapped tokenizer's, not the texts it counted
        return {"tokenizer": self.tokenizer}


def test_each_example_is_tokenized_once_and_cached(minilm_tokenizer, data_dir, tmp_path):
    examples, _ = build_examples([load_source("snli", data_dir), load_source("mnli", data_dir)])
    counting = CountingTokenizer(minilm_tokenizer)
    tokenized = tokenize_examples(examples, counting, 16, cache_dir=tmp_path)
    present = [text for column in ("premise", "entailment", "contradiction") for text in examples[column] if text]
    assert sorted(counting.texts) == sorted(present)  # every sentence of every example, once
    for k in (0, 39):  # against the tokenizer called directly
        for column in ("premise", "entailment"):
            direct = minilm_tokenizer(examples[k][column], truncation=True, max_length=16)["input_ids"]
            assert tokenized[k][f"{column}_input_ids"] == direct
    assert tokenized[39]["contradiction_input_ids"] == [] and tokenized[39]["text_ids"][2] == -1
    assert tokenized[0]["text_ids"][0] == text_id(examples[0]["premise"])
    collator = TripletCollator.for_tokenizer(minilm_tokenizer)
    for _ in range(2):  # two epochs: the DataLoader only pads
        for _batch in DataLoader(tokenized, batch_size=8, collate_fn=collator):
            pass
    assert len(counting.texts) == len(present)
    again = CountingTokenizer(minilm_tokenizer)
    cached = tokenize_examples(examples, again, 16, cache_dir=tmp_path)
    assert again.texts == [] and cached[:] == tokenized[:]  # loaded from the cache file
    tokenize_examples(examples, again, 24, cache_dir=tmp_path)
    assert len(again.texts) == len(present)  # another max_length is another cache entry


CASED_EXAMPLES = [
    {"premise": "Paris Is In France.", "entailment": "France Has A Capital.", "contradiction": "Paris Is In Spain."},
    {
        "premise": "THE DOG RUNS FAST ACROSS THE WIDE GREEN FIELD.",
        "entailment": "An Animal Moves.",
        "contradiction": None,
    },
]


def tokenized_columns(dataset: datasets.Dataset) -> dict[str, list]:
    return {name: dataset[name] for name in dataset.column_names}


def test_a_tokenizer_changed_in_place_is_another_cache_key(tmp_path):
    """The cache key hashes the tokenizer's state, not its class, path and size: lower-casing switched off (the
    normaliser replaced) or the truncation side changed in place tokenises again, never reusing the stale ids."""
    examples = datasets.Dataset.from_list(CASED_EXAMPLES)
    tokenizer = AutoTokenizer.from_pretrained(MINILM_PATH)  # its own copy: changed in place below
    lowercased = tokenized_columns(tokenize_examples(examples, tokenizer, 8, cache_dir=tmp_path))
    tokenizer.backend_tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False)
    cased = tokenized_columns(tokenize_examples(examples, tokenizer, 8, cache_dir=tmp_path))
    assert cased == tokenized_columns(tokenize_examples(examples, tokenizer, 8))  # as with no cache
    assert cased["premise_input_ids"] != lowercased["premise_input_ids"]
    tokenizer.truncation_side = "left"  # a Python-side setting the call reads
    left = tokenized_columns(tokenize_examples(examples, tokenizer, 8, cache_dir=tmp_path))
    assert left == tokenized_columns(tokenize_examples(examples, tokenizer, 8)) and left != cased
    assert len(list(tmp_path.glob("tokenized-*.arrow"))) == 3
    # a slow (Python) tokenizer: its basic tokenizer's lower-casing
    slow_class = getattr(transformers, "BertTokenizerLegacy", None)
    if slow_class is None:
        return
    slow = slow_class.from_pretrained(MINILM_PATH)
    lowercased = tokenized_columns(tokenize_examples(examples, slow, 8, cache_dir=tmp_path))
    slow.basic_tokenizer.do_lower_case = False
    cased = tokenized_columns(tokenize_examples(examples, slow, 8, cache_dir=tmp_path))
    assert cased == tokenized_columns(tokenize_examples(examples, slow, 8)) and cased != lowercased


FINGERPRINT_CODE = """
import transformers
from gausscse.data.tokenize import tokenizer_fingerprint
path = {path!r}
print(tokenizer_fingerprint(transformers.AutoTokenizer.from_pretrained(path)))
slow = getattr(transformers, "BertTokenizerLegacy", None)
print(tokenizer_fingerprint(slow.from_pretrained(path)) if slow else "")
"""


def test_the_same_tokenizer_loaded_again_hits_the_cache(tmp_path):
    """Two loads of one tokenizer (in this process, after one of them was used, or in a process with another string
    hash seed and the other HF_HUB_OFFLINE) give one cache key: the rerun loads the cached ids."""
    examples = datasets.Dataset.from_list(CASED_EXAMPLES)
    first, second = (AutoTokenizer.from_pretrained(MINILM_PATH) for _ in range(2))
    keys = [tokenizer_fingerprint(first)]
    tokenize_examples(examples, first, 8, cache_dir=tmp_path)  # a call sets the backend's truncation and padding
    keys += [tokenizer_fingerprint(first), tokenizer_fingerprint(second)]
    with mock.patch.object(type(second), "__call__", side_effect=AssertionError("tokenised again")):
        cached = tokenize_examples(examples, second, 8, cache_dir=tmp_path)
    assert tokenized_columns(cached) == tokenized_columns(tokenize_examples(examples, first, 8))
    assert len(list(tmp_path.glob("tokenized-*.arrow"))) == 1
    slow_class = getattr(transformers, "BertTokenizerLegacy", None)
    slow_keys = (
        {tokenizer_fingerprint(slow_class.from_pretrained(MINILM_PATH)) for _ in range(2)} if slow_class else set()
    )
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"  # another order of the sets of strings
    offline = "0" if os.environ.get("HF_HUB_OFFLINE") == "1" else "1"  # loaded offline or not: one tokenizer
    env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": offline}
    code = FINGERPRINT_CODE.format(path=str(MINILM_PATH))
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    fast_key, slow_key = result.stdout.split("\n")[:2]
    assert set(keys) == {fast_key} and slow_keys <= {slow_key}


TEXT_EXAMPLES = [
    {"premise": "A man sleeps.", "entailment": "A man rests.", "contradiction": None},
    {"premise": "a  man sleeps.", "entailment": "Someone rests.", "contradiction": "A man runs."},
    {"premise": "Kids play soccer in the park.", "entailment": "Kids play.", "contradiction": "Kids sleep."},
]


def tokenized(tokenizer, examples) -> list[dict]:
    dataset = datasets.Dataset.from_list(examples)
    return list(tokenize_examples(dataset, tokenizer, 16))


def test_collator_pads_as_the_tokenizer_does_and_marks_duplicate_texts(minilm_tokenizer):
    features = TripletCollator.for_tokenizer(minilm_tokenizer)(tokenized(minilm_tokenizer, TEXT_EXAMPLES))
    layout = text_batch_layout(TEXT_EXAMPLES)
    expected = minilm_tokenizer(layout.sentences, padding=True, truncation=True, max_length=16, return_tensors="pt")
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        torch.testing.assert_close(features[name], expected[name])
    assert features["contradiction_index"].tolist() == [-1, 6, 7]
    assert features["text_ids"][0, 0] == features["text_ids"][1, 0] == text_id("A man sleeps.")
    torch.testing.assert_close(features["text_ids"], layout.text_ids)
    without = TripletCollator.for_tokenizer(minilm_tokenizer, with_contradictions=False)(
        tokenized(minilm_tokenizer, TEXT_EXAMPLES)
    )
    assert without["input_ids"].shape[0] == 6 and without["contradiction_index"].tolist() == [-1, -1, -1]
    assert (without["text_ids"][:, 2] == -1).all()


def test_dataloader_workers_give_the_same_batches(minilm_tokenizer, data_dir):
    examples, _ = build_examples([load_source("snli", data_dir)])
    dataset = tokenize_examples(examples, minilm_tokenizer, 16)
    encoder_config = AutoConfig.from_pretrained(MINILM_PATH)
    collator = TripletCollator.for_tokenizer(minilm_tokenizer, encoder_config, pack=True, pack_length=32)
    serial = list(DataLoader(dataset, batch_size=8, collate_fn=collator))
    parallel = list(DataLoader(dataset, batch_size=8, collate_fn=collator, num_workers=2))
    assert len(serial) == len(parallel) == 3
    for one, other in zip(serial, parallel, strict=True):
        for name in one:
            torch.testing.assert_close(one[name], other[name])
