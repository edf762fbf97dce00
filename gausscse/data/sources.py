"""Training data from anywhere: the built-in NLI sources, your own files, any Hub dataset → examples → token ids.

Sources (several concatenate, in this order):

* built-in names (``--train_datasets snli mnli``): the offline files of ``shared/data`` or their Hub copies;
* files (``--train_file``): CSV, TSV, JSON, JSON Lines or Parquet, each optionally gzip-compressed (``.csv.gz``);
* Hub datasets (``--dataset_name`` / ``--dataset_config_name`` / ``--train_split``), e.g. ``stanfordnlp/snli``,
  ``nyu-mll/multi_nli`` or ``sentence-transformers/all-nli`` with config ``triplet``.

Each source has one of three shapes, recognised from its column names (see [`COLUMN_ALIASES`]) or set with
``--data_shape`` / ``--columns role=name``:

* ``nli``: ``premise``, ``hypothesis``, ``label`` (strings entailment/neutral/contradiction, or the Hub's integer ids
  0/1/2, also as text and mixed with names in one column; −1 and ``-`` mark unlabelled rows, which are skipped and
  counted). Rows of all NLI sources are grouped by premise as SimCSE builds its triplets: each entailment hypothesis
  of a premise becomes one example, paired with a contradiction hypothesis of the same premise (cycling through them
  when there are fewer) or with none;
* ``triplet``: ``anchor``/``positive``/``negative`` (SimCSE's ``sent0``/``sent1``/``hard_neg``): one example a row;
* ``pair``: ``anchor``/``positive``: one example a row, without a contradiction (masked out of V_C by the loss).

An exact repeat of an (premise, hypothesis, label) row or of a whole example is counted once. Then
``gausscse.data.tokenize`` tokenises every example once (a cached ``datasets.map``); the collator of
``gausscse.training.batch`` only pads or packs token ids.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import gzip
import itertools
import json
import logging
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, TextIO

import datasets
import pyarrow as pa
from datasets.packaged_modules.json.json import JsonConfig

from gausscse.data.registry import HUB_SOURCES, LOCAL_FILES, NLI_LABELS, default_data_dir, load_split
from gausscse.io import json_lines, json_value

logger = logging.getLogger(__name__)

TRAIN_SOURCES = ("snli", "mnli", "sick")
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
# Data file formats: suffix (after an optional .gz) -> datasets builder and its keyword arguments. CSV and TSV are
# read by [`read_delimited`], not by the datasets builder (pandas): every cell is text, only an empty cell is missing.
# JSON: the builder reads the file in blocks with pyarrow, each column of one type. A column whose values mix types
# (a label column of 0, "entailment", 2, -1) came out as JSON text in some blocks (labels '"entailment"', quotes and
# all) or failed the read, depending on where in the file the types change; `on_mixed_types=None` (where datasets
# has the option) makes every such file fail there, and [`read_json`] reads it.
_JSON_KWARGS = {"on_mixed_types": None} if "on_mixed_types" in {f.name for f in fields(JsonConfig)} else {}
FILE_FORMATS: dict[str, tuple[str, dict[str, Any]]] = {
    ".csv": ("csv", {}),
    ".tsv": ("tsv", {}),
    ".json": ("json", _JSON_KWARGS),
    ".jsonl": ("json", _JSON_KWARGS),
    ".parquet": ("parquet", {}),
}
# The JSON builder logs an error before it fails on a column of mixed types, which [`read_json`] then reads.
JSON_BUILDER_LOGGER = "datasets.packaged_modules.json.json"
UNLABELLED = (-1, "-")  # SNLI's gold label "-" (no majority) and the Hub's −1
INTEGER_LABELS = dict(enumerate(NLI_LABELS))  # the Hub's ids: 0 entailment, 1 neutral, 2 contradiction
INTEGER_LABEL_TEXT = {str(number): label for number, label in INTEGER_LABELS.items()}  # the ids as CSV/TSV text


class DataError(ValueError):
    """Training data that cannot be used: an unreadable or empty file, a missing column, a bad row."""


class BadRowError(DataError):
    """A training row with a missing field, an unknown label or empty text."""


@dataclass
class SourceRows:
    """One source of training rows, its shape and where each row comes from (for error messages).

    Attributes:
        name: e.g. ``snli`` or the file name.
        location: the file (or Hub id) the rows come from.
        rows: ``datasets.Dataset``.
        shape: ``nli``, ``triplet`` or ``pair``.
        columns: role → column name (roles of [`SHAPE_ROLES`]).
        line_numbers: whether row k is line k + 1 of ``location`` (JSON Lines), else rows are reported by index.
    """

    name: str
    location: str
    rows: datasets.Dataset
    shape: str
    columns: dict[str, str]
    line_numbers: bool = False

    def where(self, index: int) -> str:
        return f"{self.location}: line {index + 1}" if self.line_numbers else f"{self.location}: row {index}"


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
    per_source: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------------------------- shapes, columns


def resolve_shape(
    column_names: Sequence[str], location: str, shape: str = "auto", columns: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str]]:
    """The shape of a source and its role → column mapping.

    ``columns`` (from ``--columns role=name``) overrides the recognised names; ``shape`` other than ``auto`` forces
    the shape. Raises [`DataError`] naming ``location`` and the missing column when a required role has no column.
    """
    if shape not in SHAPES:
        raise DataError(f"Unknown data shape {shape!r}; expected one of {', '.join(SHAPES)}")
    overrides = dict(columns or {})
    unknown_roles = sorted(set(overrides) - set(COLUMN_ALIASES))
    if unknown_roles:
        raise DataError(f"Unknown column role(s) {unknown_roles}; expected roles: {', '.join(COLUMN_ALIASES)}")
    present = set(column_names)
    found: dict[str, str] = {}
    for role, aliases in COLUMN_ALIASES.items():
        name = overrides.get(role) or next((alias for alias in aliases if alias in present), None)
        if name is not None and name in present:
            found[role] = name
    candidates = [shape] if shape != "auto" else list(SHAPE_ROLES)
    if shape == "auto" and any(role in overrides for role in SHAPE_ROLES["nli"]):
        candidates = ["nli"]
    for candidate in candidates:
        if all(role in found for role in SHAPE_ROLES[candidate]):
            return candidate, {role: found[role] for role in SHAPE_ROLES[candidate]}
    wanted = candidates[0] if len(candidates) == 1 else None
    if wanted is not None:
        missing = [
            f"{role} (column {overrides.get(role) or ' / '.join(COLUMN_ALIASES[role])})"
            for role in SHAPE_ROLES[wanted]
            if role not in found
        ]
        raise DataError(
            f"{location}: missing column(s) for the {wanted} shape: {', '.join(missing)}; the columns are "
            f"{', '.join(column_names)} (map them with --columns role=name)"
        )
    raise DataError(
        f"{location}: cannot tell the data shape from the columns {', '.join(column_names)}; expected "
        "premise/hypothesis/label (NLI rows), anchor/positive/negative (triplets) or anchor/positive (pairs); "
        "set --data_shape and --columns role=name"
    )


def parse_column_overrides(pairs: Sequence[str] | None) -> dict[str, str]:
    """``["premise=sentence_A", ...]`` → ``{"premise": "sentence_A", ...}`` (from ``--columns``)."""
    overrides: dict[str, str] = {}
    for pair in pairs or ():
        role, separator, name = pair.partition("=")
        if not separator or not role or not name:
            raise DataError(f"--columns expects role=name items, got {pair!r}")
        overrides[role.strip()] = name.strip()
    return overrides


# ------------------------------------------------------------------------------------------------------- sources


def file_format(path: Path) -> tuple[str, dict[str, Any], bool]:
    """``(datasets builder, its keyword arguments, gzip-compressed)`` from a data file's suffixes."""
    suffixes = [suffix.lower() for suffix in path.suffixes]
    compressed = bool(suffixes) and suffixes[-1] == ".gz"
    suffix = suffixes[-2] if compressed and len(suffixes) > 1 else (suffixes[-1] if suffixes else "")
    if suffix not in FILE_FORMATS or (compressed and suffix == ".parquet"):
        known = ", ".join(FILE_FORMATS)
        raise DataError(f"{path}: unknown data file format; expected {known} (optionally .gz, not for .parquet)")
    builder, kwargs = FILE_FORMATS[suffix]
    return builder, kwargs, compressed


def check_readable(path: Path, compressed: bool, text: bool) -> None:
    """Fail early, naming the file, on a missing, empty, non-gzip or truncated/corrupt gzip file, and on a text
    format (CSV/TSV/JSON) that is not UTF-8 (naming the line and byte)."""
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty")
    if compressed:
        with path.open("rb") as handle:
            if handle.read(2) != b"\x1f\x8b":
                raise DataError(f"{path}: not a gzip file (the name ends in .gz); decompress it or rename it")
    if not (compressed or text):
        return
    try:
        with gzip.open(path, "rb") if compressed else path.open("rb") as handle:
            decoder = codecs.getincrementaldecoder("utf-8")()
            lines_before = 0
            while block := handle.read(1 << 20):
                if text:
                    check_utf8(path, decoder, block, lines_before)
                    lines_before += block.count(b"\n")
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(f"{path}: corrupt gzip file ({error})") from error


def check_utf8(path: Path, decoder: codecs.IncrementalDecoder, block: bytes, lines_before: int) -> None:
    """Decode the next ``block`` of the file; ``DataError`` naming the file, line and byte if it is not UTF-8."""
    try:
        decoder.decode(block)
    except UnicodeDecodeError as error:
        line = lines_before + block.count(b"\n", 0, error.start) + 1
        column = error.start - (block.rfind(b"\n", 0, error.start) + 1) + 1
        raise DataError(
            f"{path}, line {line}: not UTF-8 text (byte 0x{block[error.start : error.start + 1].hex()} at column "
            f"{column}); re-save the file as UTF-8"
        ) from None


def read_table(path: str | Path) -> datasets.Dataset:
    """The rows of one data file (see [`FILE_FORMATS`]); ``DataError`` naming the file when it cannot be read or
    holds no row.

    CSV and TSV cells are all text, verbatim (``None``, ``NA``, ``null``, ``nan``, ``N/A``, ``0`` are sentences or
    labels like any other); only an empty cell is missing (``None``). TSV has no quoting: each line is one row, split
    on tabs. CSV follows standard quoting (RFC 4180: a quote inside a quoted cell is doubled; a quoted cell may hold
    commas and line breaks); a malformed CSV or a row with the wrong number of fields is a ``DataError`` naming the
    file and line.

    JSON and JSON Lines values keep their JSON types; a column whose values mix types (a label column of ``0``,
    ``"entailment"``, ``2``, ``-1``) is read as text (see [`read_json`]), wherever in the file the types change."""
    path = Path(path)
    builder, kwargs, compressed = file_format(path)
    check_readable(path, compressed, text=builder != "parquet")
    if builder in ("csv", "tsv"):
        rows = read_delimited(path, compressed, tsv=builder == "tsv")
    else:
        try:
            with quiet_logger(JSON_BUILDER_LOGGER if builder == "json" else None):
                rows = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
        except Exception as error:  # datasets/pyarrow raise many types; the user needs the file name
            if "corresponds to no data" in str(error):  # datasets' words for a file with a header and no row
                raise DataError(f"{path}: no rows") from error
            if builder != "json":
                raise DataError(
                    f"{path}: could not be read as {builder.upper()} ({type(error).__name__}: {error})"
                ) from error
            # mixed types in a column (see FILE_FORMATS), or not JSON: the json module reads it or names the line
            rows = read_json(path, compressed)
    if len(rows) == 0:
        raise DataError(f"{path}: no rows")
    return rows


@contextlib.contextmanager
def quiet_logger(name: str | None) -> Iterator[None]:
    """Drop the records of logger ``name`` (none: nothing dropped) while the block runs."""
    if name is None:
        yield
        return
    target = logging.getLogger(name)
    drop = lambda record: False  # noqa: E731
    target.addFilter(drop)
    try:
        yield
    finally:
        target.removeFilter(drop)


def read_delimited(path: Path, compressed: bool, tsv: bool) -> datasets.Dataset:
    """A CSV (standard quoting) or TSV (no quoting: one row a line, split on tabs) file with a header line, as string
    columns; an empty cell is ``None``, any other cell its text verbatim. Blank lines are skipped. ``DataError``
    naming the file and line for malformed quoting, a row with the wrong number of fields or a repeated column name."""
    opened = gzip.open(path, "rt", encoding="utf-8-sig", newline="\n" if tsv else "") if compressed else None
    with opened or path.open(encoding="utf-8-sig", newline="\n" if tsv else "") as handle:
        header: list[str] | None = None
        columns: list[list[str | None]] = []
        for line, fields in tsv_records(handle) if tsv else csv_records(handle, path):
            if fields in ([], [""]):  # a blank line
                continue
            if header is None:
                header = fields
                repeated = sorted({name for name in header if header.count(name) > 1})
                if repeated:
                    raise DataError(f"{path}, line {line}: repeated column name(s) {repeated} in the header")
                columns = [[] for _ in header]
                continue
            if len(fields) != len(header):
                hint = "; a TSV cell cannot hold a tab" if tsv and len(fields) > len(header) else ""
                raise DataError(
                    f"{path}, line {line}: {len(fields)} fields, expected {len(header)} as in the header "
                    f"({', '.join(header)}){hint}"
                )
            for column, value in zip(columns, fields, strict=True):
                column.append(value if value != "" else None)
    if header is None:
        raise DataError(f"{path}: no rows")
    features = datasets.Features({name: datasets.Value("string") for name in header})
    return datasets.Dataset.from_dict(dict(zip(header, columns, strict=True)), features=features)


def read_json(path: Path, compressed: bool) -> datasets.Dataset:
    """A JSON Lines file (one object a line; blank lines skipped) or one JSON array of objects, read with the json
    module: the reader of the files pyarrow cannot read, those with a column whose values mix JSON types.

    A key missing from a row is ``None`` (as ``null``). A column of one type keeps it (pyarrow's inference: ``0`` and
    ``0.5`` are numbers); a column mixing types is text: a string as it is, ``null`` missing (``None``), any other
    value its JSON text (``0`` → ``"0"``, ``true`` → ``"true"``), as a CSV cell holds it. So a label column of ``0``,
    ``"entailment"``, ``2``, ``-1`` holds ``"0"``, ``"entailment"``, ``"2"``, ``"-1"``: the labels they are
    (see [`normalize_label`]). ``DataError`` naming the file and line for text that is not JSON or a row that is not
    an object."""
    opened = gzip.open(path, "rt", encoding="utf-8-sig", newline="\n") if compressed else None
    with opened or path.open(encoding="utf-8-sig", newline="\n") as handle:
        records = list(json_records(handle, path))
    columns: dict[str, list[Any]] = {}
    for index, record in enumerate(records):
        for name in record:
            if name not in columns:  # a key first seen here: null in the rows before
                columns[name] = [None] * index
        for name, values in columns.items():
            values.append(record.get(name))
    if not records:
        raise DataError(f"{path}: no rows")
    arrays = {}
    for name, values in columns.items():
        try:
            arrays[name] = pa.array(values)
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # values of more than one JSON type
            types = sorted({type(value).__name__ for value in values if value is not None})
            logger.info("%s: column %r mixes JSON types (%s); read as text", path, name, ", ".join(types))
            arrays[name] = pa.array(
                [value if value is None or isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                 for value in values],
                pa.string(),
            )  # fmt: skip
    return datasets.Dataset(pa.table(arrays))


def json_records(handle: TextIO, path: Path) -> Iterable[dict[str, Any]]:
    """The objects of a JSON Lines file or of one JSON array (its first character ``[``); ``DataError`` naming the
    file and line for text that is not JSON or a value that is not an object."""
    first = handle.readline()
    if not first.lstrip().startswith("["):
        return json_lines(itertools.chain([first], handle), path, dict, DataError)
    values = json_value(first + handle.read(), path, list, error=DataError)
    for index, value in enumerate(values):
        if not isinstance(value, dict):
            raise DataError(f"{path}: item {index} of the JSON array is not an object: {value!r:.80}")
    return values


def tsv_records(handle: Iterable[str]) -> Iterable[tuple[int, list[str]]]:
    """``(line number, fields)`` of each line of a TSV file: split on tabs, every field verbatim (no quoting)."""
    for line, text in enumerate(handle, start=1):
        yield line, text.removesuffix("\n").removesuffix("\r").split("\t")


def csv_records(handle: Iterable[str], path: Path) -> Iterable[tuple[int, list[str]]]:
    """``(first line, fields)`` of each record of a CSV file (standard quoting, strict); ``DataError`` naming the file
    and the line where a malformed record starts (e.g. a quote left open swallows the lines after it)."""
    reader = csv.reader(handle, strict=True)
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            raise DataError(
                f"{path}, line {start}: malformed CSV ({error}); a quoted cell must end with a quote and a quote "
                'inside it is written twice (""), or the cell is not quoted at all'
            ) from None
        yield start, fields


def load_file_source(path: str | Path, shape: str = "auto", columns: Mapping[str, str] | None = None) -> SourceRows:
    """Read one training file (see [`FILE_FORMATS`]) into a [`SourceRows`]; errors name the file."""
    path = Path(path)
    rows = read_table(path)
    found_shape, mapping = resolve_shape(rows.column_names, str(path), shape, columns)
    return SourceRows(path.name, str(path), rows, found_shape, mapping, line_numbers=suffix_is_lines(path))


def suffix_is_lines(path: Path) -> bool:
    """Whether row k of the file is its line k + 1 (JSON Lines)."""
    return ".jsonl" in [suffix.lower() for suffix in path.suffixes]


def load_hub_source(
    name: str,
    config_name: str | None = None,
    split: str = "train",
    shape: str = "auto",
    columns: Mapping[str, str] | None = None,
) -> SourceRows:
    """One split of a Hub dataset (``datasets.load_dataset(name, config_name, split=split)``)."""
    location = f"{name}{'/' + config_name if config_name else ''} ({split})"
    try:
        rows = datasets.load_dataset(name, config_name, split=split)
    except Exception as error:
        raise DataError(f"{location}: could not be loaded ({type(error).__name__}: {error})") from error
    found_shape, mapping = resolve_shape(rows.column_names, location, shape, columns)
    return SourceRows(name, location, rows, found_shape, mapping)


def load_source(name: str, data_dir: str | Path | None = None) -> SourceRows:
    """The train split of a built-in source (``snli``, ``mnli`` or ``sick``) from ``data_dir`` (layout of
    ``shared/data``; default [`gausscse.data.registry.default_data_dir`]) or, with no local folder, the Hub."""
    if name not in TRAIN_SOURCES:
        raise DataError(f"Unknown training source {name!r}; valid sources: {', '.join(TRAIN_SOURCES)}")
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    rows = load_split(name, "train", folder)
    if folder is not None:
        relative_path, row_filter = LOCAL_FILES[(name, "train")]
        location, line_numbers = str(folder / relative_path), row_filter is None
    else:
        hub_id, config, split = HUB_SOURCES[(name, "train")]
        location, line_numbers = f"{hub_id}{'/' + config if config else ''} ({split})", False
    shape, mapping = resolve_shape(rows.column_names, location, "nli")
    return SourceRows(name, location, rows, shape, mapping, line_numbers)


# ------------------------------------------------------------------------------------------------------ examples


def normalize_label(label: Any) -> str | None:
    """``entailment``/``neutral``/``contradiction`` from a string (any case) or the Hub's id 0/1/2 (also as text, as
    CSV/TSV cells hold it); ``None`` for an unlabelled row (−1 or ``-``); raises ``ValueError`` for anything else."""
    if isinstance(label, bool):
        raise ValueError(f"unknown label {label!r}")
    if isinstance(label, int) and label in INTEGER_LABELS:
        return INTEGER_LABELS[label]
    if label in UNLABELLED or (isinstance(label, str) and label.strip() in ("-1", "-")):
        return None
    if isinstance(label, str) and label.strip() in INTEGER_LABEL_TEXT:  # a CSV/TSV cell holds the id as text
        return INTEGER_LABEL_TEXT[label.strip()]
    if isinstance(label, str) and label.strip().lower() in NLI_LABELS:
        return label.strip().lower()
    raise ValueError(
        f"unknown label {label!r} (expected one of {', '.join(NLI_LABELS)}, or 0/1/2; -1 or '-' = unlabelled)"
    )


def text_problem(column: str, value: Any) -> str | None:
    """Why ``value`` is not a usable sentence of ``column``, or ``None``."""
    if value is None:
        return f"missing {column}"
    if not isinstance(value, str):
        return f"{column} is not a string: {value!r}"
    if not value.strip():
        return f"empty {column}"
    return None


def source_rows(source: SourceRows, drop_bad_rows: bool, stats: DataStats) -> Iterable[tuple[Any, ...]]:
    """Yield the role values of each usable row of ``source`` (NLI: ``(premise, hypothesis, label)`` with the
    label normalised; unlabelled rows are counted and skipped). A bad row raises [`BadRowError`] naming the file and
    row, or is counted in ``stats.bad_rows_dropped`` when ``drop_bad_rows``."""
    roles = SHAPE_ROLES[source.shape]
    values = source.rows.select_columns([source.columns[role] for role in roles]).to_dict()
    for index, row in enumerate(zip(*(values[source.columns[role]] for role in roles), strict=True)):
        stats.rows += 1
        problem = None
        for position, role in enumerate(roles):
            if role != "label":
                problem = problem or text_problem(source.columns[role], row[position])
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
            raise BadRowError(f"{source.where(index)}: {problem} (pass --drop_bad_rows to skip such rows)")


def build_examples(sources: Sequence[SourceRows], drop_bad_rows: bool = False) -> tuple[datasets.Dataset, DataStats]:
    """Examples from all sources (see the module docstring): NLI rows grouped by premise, then triplets and pairs.

    Returns the examples (columns ``premise``, ``entailment``, ``contradiction``; the last is ``None`` when there is
    no contradiction) in first-seen order, and the counts.
    """
    stats = DataStats()
    groups: dict[str, tuple[dict[str, None], dict[str, None]]] = {}  # premise -> ordered sets of hypotheses
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
            hypotheses = entailments if label == "entailment" else contradictions
            stats.duplicate_rows += hypothesis in hypotheses
            hypotheses[hypothesis] = None
        stats.per_source[source.location] = stats.rows - before
    examples: dict[str, list[str | None]] = {column: [] for column in EXAMPLE_COLUMNS}
    for premise, (entailments, contradictions) in groups.items():
        if not entailments:
            stats.premises_without_entailment += 1
        negatives = list(contradictions)
        for position, entailment in enumerate(entailments):
            examples["premise"].append(premise)
            examples["entailment"].append(entailment)
            examples["contradiction"].append(negatives[position % len(negatives)] if negatives else None)
    for premise, entailment, contradiction in ready:
        examples["premise"].append(premise)
        examples["entailment"].append(entailment)
        examples["contradiction"].append(contradiction)
    stats.examples = len(examples["premise"])
    stats.complete_triplets = sum(contradiction is not None for contradiction in examples["contradiction"])
    stats.entailment_only = stats.examples - stats.complete_triplets
    if stats.examples == 0:
        where = ", ".join(source.location for source in sources)
        raise DataError(f"The training data ({where}) holds no (premise, entailment hypothesis) pair")
    features = datasets.Features({column: datasets.Value("string") for column in EXAMPLE_COLUMNS})
    return datasets.Dataset.from_dict(examples, features=features), stats


@dataclass
class DataSpec:
    """Where the training data comes from (the data part of ``DataArguments``), see the module docstring."""

    train_datasets: Sequence[str] = ()
    train_files: Sequence[str] = ()
    dataset_names: Sequence[str] = ()
    dataset_config_names: Sequence[str | None] = ()
    train_split: str = "train"
    data_dir: str | Path | None = None
    shape: str = "auto"
    columns: Mapping[str, str] = field(default_factory=dict)

    def load_sources(self) -> list[SourceRows]:
        if self.dataset_config_names and len(self.dataset_config_names) != len(self.dataset_names):
            raise DataError(
                f"--dataset_config_name takes one value per --dataset_name ({len(self.dataset_names)}), got "
                f"{len(self.dataset_config_names)}; write 'none' for a dataset without config"
            )
        configs = list(self.dataset_config_names) or [None] * len(self.dataset_names)
        sources = [load_source(name, self.data_dir) for name in self.train_datasets]
        sources += [load_file_source(path, self.shape, self.columns) for path in self.train_files]
        sources += [
            load_hub_source(name, None if config in (None, "none") else config, self.train_split, self.shape,
                            self.columns)
            for name, config in zip(self.dataset_names, configs, strict=True)
        ]  # fmt: skip
        if not sources:
            raise DataError("No training data: pass --train_datasets, --train_file or --dataset_name")
        return sources


def load_training_examples(
    spec: DataSpec | Sequence[str], data_dir: str | Path | None = None, drop_bad_rows: bool = False
) -> tuple[datasets.Dataset, DataStats]:
    """Load the sources of ``spec`` (or the built-in source names, from ``data_dir``) and build the examples; logs
    how many of each kind were built."""
    if not isinstance(spec, DataSpec):
        spec = DataSpec(train_datasets=list(spec), data_dir=data_dir)
    dataset, stats = build_examples(spec.load_sources(), drop_bad_rows)
    logger.info(
        "Training examples: %d (%d complete triplets, %d without a contradiction) from %d rows %s; %d neutral and "
        "%d unlabelled rows unused, %d repeated rows counted once, %d bad rows dropped, %d premises without an "
        "entailment hypothesis",
        stats.examples,
        stats.complete_triplets,
        stats.entailment_only,
        stats.rows,
        stats.per_source,
        stats.neutral_rows,
        stats.unlabelled_rows,
        stats.duplicate_rows,
        stats.bad_rows_dropped,
        stats.premises_without_entailment,
    )
    return dataset, stats


__all__ = [
    "COLUMN_ALIASES",
    "EXAMPLE_COLUMNS",
    "FILE_FORMATS",
    "SHAPES",
    "TRAIN_SOURCES",
    "BadRowError",
    "DataError",
    "DataSpec",
    "DataStats",
    "SourceRows",
    "build_examples",
    "load_file_source",
    "load_hub_source",
    "load_source",
    "load_training_examples",
    "normalize_label",
    "parse_column_overrides",
    "read_table",
    "resolve_shape",
]
