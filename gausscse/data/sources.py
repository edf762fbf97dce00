"""Training data from built-in names, your files (CSV/TSV/JSON/JSON Lines/Parquet, optionally ``.gz``) and Hub datasets,
in three shapes (``SHAPE_ROLES``, recognised from ``COLUMN_ALIASES`` or set with ``--data_shape``/``--columns``) →
examples (premise, entailment, contradiction or ``None``), tokenised by ``gausscse.data.tokenize``."""

from __future__ import annotations

import codecs
import csv
import gzip
import itertools
import json
import logging
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

import datasets
import pyarrow as pa
from datasets.packaged_modules.json.json import JsonConfig

from gausscse.data.registry import HUB_SOURCES, LOCAL_FILES, NLI_LABELS, default_data_dir, load_split
from gausscse.io import json_lines, json_value

logger = logging.getLogger(__name__)

TRAIN_SOURCES = ("snli", "mnli", "lingnli", "sick")
EXAMPLE_COLUMNS = ("premise", "entailment", "contradiction")
SHAPES = ("auto", "nli", "triplet", "pair")
# role -> column names recognised for it, first match wins; a shape is the first whose required roles all match.
COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "premise": ("premise", "sentence1"),
    "hypothesis": ("hypothesis", "sentence2"),
    "label": ("label", "gold_label"),
    "anchor": ("anchor", "sent0"),
    "positive": ("positive", "sent1", "entailment"),
    "negative": ("negative", "hard_neg", "contradiction"),
}
SHAPE_ROLES: dict[str, tuple[str, ...]] = {
    "nli": ("premise", "hypothesis", "label"),
    "triplet": ("anchor", "positive", "negative"),
    "pair": ("anchor", "positive"),
}
# suffix (after an optional .gz) -> datasets builder and its keyword arguments; CSV/TSV are read by [`read_delimited`].
# A JSON column of mixed types must fail in the builder (``on_mixed_types=None``, where datasets has it), so that
# [`read_json`] reads it rather than pyarrow turning some values into JSON text.
_JSON_KWARGS = {"on_mixed_types": None} if "on_mixed_types" in {f.name for f in fields(JsonConfig)} else {}
FILE_FORMATS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("tsv", {}),
    ".json": ("json", _JSON_KWARGS),
    ".jsonl": ("json", _JSON_KWARGS),
    ".parquet": ("parquet", {}),
}
# label text (lower-cased) -> label: the names, the Hub's ids 0/1/2, and unlabelled (SNLI's "-", the Hub's -1)
LABELS = {"-": None, "-1": None, **{str(n): name for n, name in enumerate(NLI_LABELS)}, **{n: n for n in NLI_LABELS}}


class DataError(ValueError):
    """Training data that cannot be used: an unreadable or empty file, a missing column, a bad row."""


class BadRowError(DataError):
    """A training row with a missing field, an unknown label or empty text."""


@dataclass
class SourceRows:
    """The ``rows`` of one source, read from ``location`` (a path or Hub split), in ``shape`` with ``columns`` (role →
    column name); ``line_numbers``: row k is line k + 1 of the file (for messages)."""

    location: str
    rows: datasets.Dataset
    shape: str
    columns: dict[str, str]
    line_numbers: bool = False
    repeat: int = 1  # each example built from these rows, this many times (--train_dataset_repeats)


@dataclass
class DataStats:
    """Counts logged when the training examples are built."""

    rows: int = 0
    bad_rows_dropped: int = 0
    unlabelled_rows: int = 0
    duplicate_rows: int = 0
    neutral_rows: int = 0
    examples: int = 0
    complete_triplets: int = 0
    entailment_only: int = 0
    premises_without_entailment: int = 0
    repeated_examples: int = 0  # the extra copies of --train_dataset_repeats (counted in examples)
    examples_built: int | None = None  # before --max_train_examples cut them (None: not cut)
    per_source: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}

    def cut_to(self, examples: datasets.Dataset) -> None:
        """Count what is trained on: the first ``examples`` of those built (``--max_train_examples``)."""
        self.examples_built = self.examples_built or self.examples
        self.examples = len(examples)
        self.complete_triplets = sum(negative is not None for negative in examples["contradiction"])
        self.entailment_only = self.examples - self.complete_triplets


def resolve_shape(
    column_names: Sequence[str], location: str, shape: str = "auto", columns: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str]]:
    """The shape of a source and its role → column mapping: ``columns`` (``--columns``) override the recognised names,
    a ``shape`` other than ``auto`` is forced. [`DataError`] naming ``location`` and what is missing otherwise."""
    if shape not in SHAPES:
        raise DataError(f"Unknown data shape {shape!r}; expected one of {', '.join(SHAPES)}")
    overrides = dict(columns or {})
    unknown_roles = sorted(set(overrides) - set(COLUMN_ALIASES))
    if unknown_roles:
        raise DataError(f"Unknown column role(s) {unknown_roles}; expected roles: {', '.join(COLUMN_ALIASES)}")
    found: dict[str, str] = {}
    for role, aliases in COLUMN_ALIASES.items():
        name = overrides.get(role) or next((alias for alias in aliases if alias in column_names), None)
        if name in column_names:
            found[role] = name
    candidates = [shape] if shape != "auto" else list(SHAPE_ROLES)
    if shape == "auto" and any(role in overrides for role in SHAPE_ROLES["nli"]):  # NLI columns given
        candidates = ["nli"]
    for candidate in candidates:
        if all(role in found for role in SHAPE_ROLES[candidate]):
            return candidate, {role: found[role] for role in SHAPE_ROLES[candidate]}
    columns_are = f"the columns are {', '.join(column_names)} (map them with --columns role=name)"
    if len(candidates) > 1:
        shapes = "premise/hypothesis/label (NLI rows), anchor/positive/negative (triplets) or anchor/positive (pairs)"
        raise DataError(f"{location}: cannot tell the data shape; expected {shapes}; {columns_are} or set --data_shape")
    absent = [role for role in SHAPE_ROLES[candidates[0]] if role not in found]
    missing = [f"{role} (column {overrides.get(role) or ' / '.join(COLUMN_ALIASES[role])})" for role in absent]
    raise DataError(f"{location}: missing column(s) for the {candidates[0]} shape: {', '.join(missing)}; {columns_are}")


MAX_REPEATS = 100  # --train_dataset_repeats: more copies of a set than this is a typo, not a recipe


def parse_repeats(pairs: Sequence[str] | None) -> dict[str, int]:
    """``["lingnli=2", ...]`` → ``{"lingnli": 2, ...}`` (from ``--train_dataset_repeats``; counts in
    [1, ``MAX_REPEATS``], each name once)."""
    repeats: dict[str, int] = {}
    for pair in pairs or ():
        name, separator, count = pair.partition("=")
        name = name.strip()
        if not separator or not name or not count.strip().isdigit() or not 1 <= int(count) <= MAX_REPEATS:
            raise DataError(
                f"--train_dataset_repeats expects name=count items with a count from 1 to {MAX_REPEATS}, got {pair!r}"
            )
        if name in repeats:
            raise DataError(f"--train_dataset_repeats names {name!r} twice ({name}={repeats[name]}, {pair!r}): once")
        repeats[name] = int(count)
    return repeats


def parse_column_overrides(pairs: Sequence[str] | None) -> dict[str, str]:
    """``["premise=sentence_A", ...]`` → ``{"premise": "sentence_A", ...}`` (from ``--columns``)."""
    overrides: dict[str, str] = {}
    for pair in pairs or ():
        role, separator, name = pair.partition("=")
        if not separator or not role or not name:
            raise DataError(f"--columns expects role=name items, got {pair!r}")
        overrides[role.strip()] = name.strip()
    return overrides


def read_table(path: str | Path) -> datasets.Dataset:
    """The rows of one data file (see ``FILE_FORMATS``); [`DataError`] naming the file (and line) when it is missing,
    empty, not gzip or a corrupt gzip, not UTF-8 (naming the byte), cannot be read or holds no row. CSV/TSV cells are
    text verbatim ([`read_delimited`]); JSON values keep their types, a column mixing types is text ([`read_json`])."""
    path = Path(path)
    name = path.name.lower()
    compressed = name.endswith(".gz")
    suffix = Path(name.removesuffix(".gz")).suffix
    if suffix not in FILE_FORMATS or (compressed and suffix == ".parquet"):
        known = ", ".join(FILE_FORMATS)
        raise DataError(f"{path}: unknown data file format; expected {known} (optionally .gz, not for .parquet)")
    builder, kwargs = FILE_FORMATS[suffix]
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty")
    if builder != "parquet":  # text: check gzip and UTF-8 here, where the line can be named
        with path.open("rb") as handle:
            if compressed and handle.read(2) != b"\x1f\x8b":
                raise DataError(f"{path}: not a gzip file (the name ends in .gz); decompress it or rename it")
        decoder, lines_before = codecs.getincrementaldecoder("utf-8")(), 0
        try:
            with gzip.open(path, "rb") if compressed else path.open("rb") as handle:
                while block := handle.read(1 << 20):
                    decoder.decode(block)
                    lines_before += block.count(b"\n")
        except (OSError, EOFError, zlib.error) as error:
            raise DataError(f"{path}: corrupt gzip file ({error})") from error
        except UnicodeDecodeError as error:
            line = lines_before + block.count(b"\n", 0, error.start) + 1
            column = error.start - block.rfind(b"\n", 0, error.start)
            byte = f"byte 0x{block[error.start : error.start + 1].hex()} at column {column}"
            raise DataError(f"{path}, line {line}: not UTF-8 text ({byte}); re-save the file as UTF-8") from None
    if builder in ("csv", "tsv"):
        rows = read_delimited(path, compressed, tsv=builder == "tsv")
    else:
        json_logger = logging.getLogger("datasets.packaged_modules.json.json")  # logs an error on mixed types
        was_disabled, json_logger.disabled = json_logger.disabled, True
        try:
            rows = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
        except Exception as error:  # datasets/pyarrow raise many types; the user needs the file name
            if "corresponds to no data" in str(error):  # datasets' words for a file with a header and no row
                raise DataError(f"{path}: no rows") from error
            if builder != "json":
                raise DataError(f"{path}: could not be read as {builder.upper()} ({error!r})") from error
            rows = read_json(path, compressed)  # mixed types in a column, or not JSON (it names the line)
        finally:
            json_logger.disabled = was_disabled
    if len(rows) == 0:
        raise DataError(f"{path}: no rows")
    return rows


def read_delimited(path: Path, compressed: bool, tsv: bool) -> datasets.Dataset:
    """A CSV (RFC 4180 quoting) or TSV (no quoting: one row a line, split on tabs) file with a header line, as string
    columns: an empty cell is ``None``, any other its text verbatim (``NA``, ``null``, ``0`` too); blank lines are
    skipped. [`DataError`] naming the file and line for bad quoting, a wrong field count or a repeated column name."""
    header: list[str] = []
    columns: list[list[str | None]] = []
    with open_text(path, compressed, newline="\n" if tsv else "") as handle:
        if tsv:  # no quoting: a record is a line
            records = (text.removesuffix("\n").removesuffix("\r").split("\t") for text in handle)
        else:
            records = csv.reader(handle, strict=True)
        end = 0  # the last line of the records read
        try:
            for fields in records:
                line = end + 1  # where this record starts
                end = line if tsv else records.line_num
                if fields in ([], [""]):  # a blank line
                    continue
                if not header:
                    header = fields
                    repeated = sorted({name for name in header if header.count(name) > 1})
                    if repeated:
                        raise DataError(f"{path}, line {line}: repeated column name(s) {repeated} in the header")
                    columns = [[] for _ in header]
                    continue
                if len(fields) != len(header):
                    hint = "; a TSV cell cannot hold a tab" if tsv and len(fields) > len(header) else ""
                    expected = f"expected {len(header)} as in the header ({', '.join(header)})"
                    raise DataError(f"{path}, line {line}: {len(fields)} fields, {expected}{hint}")
                for column, value in zip(columns, fields, strict=True):
                    column.append(value or None)
        except csv.Error as error:
            rule = 'a quoted cell ends with a quote, a quote inside it is doubled ("")'
            raise DataError(f"{path}, line {end + 1}: malformed CSV ({error}); {rule}") from None
    features = datasets.Features({name: datasets.Value("string") for name in header})
    return datasets.Dataset.from_dict(dict(zip(header, columns, strict=True)), features=features)


def open_text(path: Path, compressed: bool, newline: str) -> TextIO:
    """``path`` as UTF-8 text (a leading BOM dropped), decompressed where ``compressed``."""
    return (gzip.open if compressed else open)(path, "rt", encoding="utf-8-sig", newline=newline)


def read_json(path: Path, compressed: bool) -> datasets.Dataset:
    """A JSON Lines file or one JSON array of objects, by the json module: a missing key is ``None``, a column mixing
    JSON types is text as a CSV holds it (strings as they are, ``null`` → ``None``, other values their JSON text).
    [`DataError`] naming the file and line for text that is not JSON or a row that is not an object."""
    with open_text(path, compressed, newline="\n") as handle:
        first = handle.readline()
        if first.lstrip().startswith("["):  # one JSON array
            records = json_value(first + handle.read(), path, list, error=DataError)
        else:
            records = list(json_lines(itertools.chain([first], handle), path, dict, DataError))
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise DataError(f"{path}: item {index} of the JSON array is not an object: {record!r:.80}")
    names = dict.fromkeys(name for record in records for name in record)
    arrays = {}
    for name in names:
        values = [record.get(name) for record in records]
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # values of more than one JSON type
            types = sorted({type(value).__name__ for value in values if value is not None})
            logger.info("%s: column %r mixes JSON types (%s); read as text", path, name, ", ".join(types))
            text = [v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in values]
            arrays[name] = pa.array(text, pa.string())
    return datasets.Dataset(pa.table(arrays))


def load_file_source(path: str | Path, shape: str = "auto", columns: Mapping[str, str] | None = None) -> SourceRows:
    """One training file (see ``FILE_FORMATS``) as a [`SourceRows`]; errors name the file."""
    path = Path(path)
    rows = read_table(path)
    lines = ".jsonl" in [suffix.lower() for suffix in path.suffixes]  # row k is line k + 1
    return SourceRows(str(path), rows, *resolve_shape(rows.column_names, str(path), shape, columns), lines)


def hub_location(name: str, config: str | None, split: str) -> str:
    """How messages name a split of a Hub dataset: ``nyu-mll/glue/mnli (train)``."""
    return f"{name}{'/' + config if config else ''} ({split})"


def load_source(name: str, data_dir: str | Path | None = None) -> SourceRows:
    """The train split of a built-in source (``TRAIN_SOURCES``) from ``data_dir`` (default: the registry's), or from
    the Hub where there is no local folder."""
    if name not in TRAIN_SOURCES:
        raise DataError(f"Unknown training source {name!r}; valid sources: {', '.join(TRAIN_SOURCES)}")
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    rows = load_split(name, "train", folder)
    if folder is not None:
        relative_path, row_filter = LOCAL_FILES[(name, "train")]
        location, line_numbers = str(folder / relative_path), row_filter is None
    else:
        location, line_numbers = hub_location(*HUB_SOURCES[(name, "train")]), False
    return SourceRows(location, rows, *resolve_shape(rows.column_names, location, "nli"), line_numbers)


def normalize_label(label: Any) -> str | None:
    """``entailment``/``neutral``/``contradiction`` from a string (any case) or the Hub's id 0/1/2 (also as text);
    ``None`` for an unlabelled row (−1 or ``-``); ``ValueError`` for anything else."""
    text = str(label) if isinstance(label, int) and not isinstance(label, bool) else label
    if isinstance(text, str) and text.strip().lower() in LABELS:
        return LABELS[text.strip().lower()]
    if label == -1:  # a float -1.0
        return None
    raise ValueError(f"unknown label {label!r} (expected one of {', '.join(NLI_LABELS)}, 0/1/2, or -1/- = unlabelled)")


def text_problem(column: str, value: Any) -> str | None:
    """Why ``value`` is not a usable sentence of ``column``, or ``None``."""
    if value is None:
        return f"missing {column}"
    if not isinstance(value, str):
        return f"{column} is not a string: {value!r}"
    return None if value.strip() else f"empty {column}"


def source_rows(source: SourceRows, drop_bad_rows: bool, stats: DataStats) -> Iterable[tuple[Any, ...]]:
    """The role values of each usable row of ``source`` (NLI: ``(premise, hypothesis, label)``, label normalised;
    unlabelled rows counted and skipped). A bad row raises [`BadRowError`] naming the file and row, or with
    ``drop_bad_rows`` is counted in ``stats.bad_rows_dropped``."""
    roles = SHAPE_ROLES[source.shape]
    values = source.rows.select_columns([source.columns[role] for role in roles]).to_dict()
    for index, row in enumerate(zip(*(values[source.columns[role]] for role in roles), strict=True)):
        stats.rows += 1
        sentences = [(role, value) for role, value in zip(roles, row, strict=True) if role != "label"]
        problem = next(filter(None, (text_problem(source.columns[role], value) for role, value in sentences)), None)
        if problem is None and source.shape == "nli":
            try:
                label = normalize_label(row[2])
            except ValueError as error:
                problem = str(error)
            else:
                if label is None:
                    stats.unlabelled_rows += 1
                    continue
                row = (row[0], row[1], label)
        if problem is None:
            yield row
        elif drop_bad_rows:
            stats.bad_rows_dropped += 1
        else:
            where = f"line {index + 1}" if source.line_numbers else f"row {index}"
            raise BadRowError(f"{source.location}: {where}: {problem} (pass --drop_bad_rows to skip such rows)")


def build_examples(sources: Sequence[SourceRows], drop_bad_rows: bool = False) -> tuple[datasets.Dataset, DataStats]:
    """The examples of all sources, each once, in first-seen order: NLI rows grouped by premise (each entailment
    hypothesis one example, paired with a contradiction of the same premise, cycling, or ``None``; neutral rows
    unused; repeated as its source's ``repeat`` says), then triplets and pairs (contradiction ``None``). Returns them
    (columns ``EXAMPLE_COLUMNS``) and the counts; [`DataError`] when there is none."""
    stats = DataStats()
    groups: dict[str, tuple[dict[str, None], dict[str, None]]] = {}  # premise -> ordered sets of hypotheses
    repeats: dict[str, int] = {}  # premise -> copies of its examples (the largest repeat of its sources)
    ready: dict[tuple[str, str, str | None], None] = {}  # triplet/pair examples, in order, each once
    for source in sources:
        before = stats.rows
        for row in source_rows(source, drop_bad_rows, stats):
            if source.shape != "nli":
                example = (row[0], row[1], row[2] if source.shape == "triplet" else None)
                stats.duplicate_rows += example in ready
                ready[example] = None
                continue
            premise, hypothesis, label = row
            if label == "neutral":
                stats.neutral_rows += 1
                continue
            entailments, contradictions = groups.setdefault(premise, ({}, {}))
            repeats[premise] = max(repeats.get(premise, 1), source.repeat)
            hypotheses = entailments if label == "entailment" else contradictions
            stats.duplicate_rows += hypothesis in hypotheses
            hypotheses[hypothesis] = None
        stats.per_source[source.location] = stats.rows - before
    rows: list[tuple[str, str, str | None]] = []
    for premise, (entailments, contradictions) in groups.items():
        stats.premises_without_entailment += not entailments
        negatives = list(contradictions)
        for position, entailment in enumerate(entailments):
            row = (premise, entailment, negatives[position % len(negatives)] if negatives else None)
            rows += [row] * repeats[premise]
            stats.repeated_examples += repeats[premise] - 1
    rows += ready
    stats.examples = len(rows)
    stats.complete_triplets = sum(row[2] is not None for row in rows)
    stats.entailment_only = stats.examples - stats.complete_triplets
    if stats.examples == 0:
        where = ", ".join(source.location for source in sources)
        raise DataError(f"The training data ({where}) holds no (premise, entailment hypothesis) pair")
    examples = {column: [row[k] for row in rows] for k, column in enumerate(EXAMPLE_COLUMNS)}
    features = datasets.Features({column: datasets.Value("string") for column in EXAMPLE_COLUMNS})
    return datasets.Dataset.from_dict(examples, features=features), stats


@dataclass
class DataSpec:
    """Where the training data comes from (the data part of ``DataArguments``)."""

    train_datasets: Sequence[str] = ()
    train_files: Sequence[str] = ()
    dataset_names: Sequence[str] = ()
    dataset_config_names: Sequence[str | None] = ()
    train_split: str = "train"
    data_dir: str | Path | None = None
    shape: str = "auto"
    columns: Mapping[str, str] = field(default_factory=dict)
    repeats: Mapping[str, int] = field(default_factory=dict)  # built-in source -> copies of each of its examples

    def load_sources(self) -> list[SourceRows]:
        configs = [None if config == "none" else config for config in self.dataset_config_names]
        if configs and len(configs) != len(self.dataset_names):
            raise DataError(
                f"--dataset_config_name takes one value per --dataset_name ({len(self.dataset_names)}), got "
                f"{len(configs)}; 'none' for a dataset without config"
            )
        unknown = sorted(set(self.repeats) - set(self.train_datasets))
        if unknown:
            raise DataError(f"--train_dataset_repeats names {unknown}, which --train_datasets does not list")
        sources = [load_source(name, self.data_dir) for name in self.train_datasets]
        for name, source in zip(self.train_datasets, sources, strict=True):
            source.repeat = self.repeats.get(name, 1)
        sources += [load_file_source(path, self.shape, self.columns) for path in self.train_files]
        for name, config in zip(self.dataset_names, configs or [None] * len(self.dataset_names), strict=True):
            location = hub_location(name, config, self.train_split)  # a split of a Hub dataset
            try:
                rows = datasets.load_dataset(name, config, split=self.train_split)
            except Exception as error:
                raise DataError(f"{location}: could not be loaded ({type(error).__name__}: {error})") from error
            shape, mapping = resolve_shape(rows.column_names, location, self.shape, self.columns)
            sources.append(SourceRows(location, rows, shape, mapping))
        if not sources:
            raise DataError("No training data: pass --train_datasets, --train_file or --dataset_name")
        return sources


def load_training_examples(
    spec: DataSpec | Sequence[str], data_dir: str | Path | None = None, drop_bad_rows: bool = False
) -> tuple[datasets.Dataset, DataStats]:
    """The examples of the sources of ``spec`` (or of built-in source names, from ``data_dir``) and their counts,
    which are logged."""
    if not isinstance(spec, DataSpec):
        spec = DataSpec(train_datasets=list(spec), data_dir=data_dir)
    dataset, stats = build_examples(spec.load_sources(), drop_bad_rows)
    logger.info(
        "Training examples: %(examples)d (%(complete_triplets)d complete triplets, %(entailment_only)d without a "
        "contradiction) from %(rows)d rows %(per_source)s; %(neutral_rows)d neutral and %(unlabelled_rows)d "
        "unlabelled rows unused, %(duplicate_rows)d repeated rows counted once, %(bad_rows_dropped)d bad rows "
        "dropped, %(premises_without_entailment)d premises without an entailment hypothesis, "
        "%(repeated_examples)d extra copies (--train_dataset_repeats)",
        stats.as_dict(),
    )
    return dataset, stats
