"""Command line: entailment search over a corpus (``gausscse-search`` or ``python -m gausscse.cli.search``).

gausscse-search build --model M --corpus sentences.txt --index DIR
gausscse-search query --index DIR --entailing "A man is playing music." -k 5
gausscse-search query --index DIR --entailed_by "A man plays a guitar on stage." -k 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import zlib
from pathlib import Path

import torch

from gausscse.data.sources import read_table
from gausscse.io import check_not_inside, check_not_nested, check_output_location, check_replaceable
from gausscse.loading import ModelLoadError, load_model
from gausscse.model import GaussCSEModel
from gausscse.search.backends import BACKENDS, uri_usage
from gausscse.search.backends.database import MEMORY, split_uri
from gausscse.search.corpus import SCORES, ModelMismatchError, SentenceIndex
from gausscse.search.index import SETTINGS_FILE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gausscse-search", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    build = commands.add_parser("build", help="encode a corpus and save its index")
    build.add_argument("--model", required=True, help="GaussCSE model folder or Hub id")
    build.add_argument("--corpus", required=True, help=".txt (one sentence per line) or a table file with --column")
    build.add_argument("--column", default=None, help="the text column of a table corpus (.jsonl/.csv/.tsv/.parquet)")
    build.add_argument("--index", required=True, help="folder to write (replaced whole if it holds an index)")
    build.add_argument("--backend", choices=BACKENDS, default="torch")
    build.add_argument("--uri", help="new database (default INDEX.lancedb/.qdrant/.milvus.db; URI#name: a collection)")
    score_help = "'search': cos − λ·KL/d (λ in the model config); 'similarity': sim(q‖x); 'auto': 'search' if λ is set"
    build.add_argument("--score", choices=SCORES, default="auto", help=score_help)
    build.add_argument("--batch_size", type=int, default=64)
    build.add_argument("--max_length", type=int, default=None, help="truncation in tokens (default: the encoder's)")
    build.add_argument("--device", default=device)
    ray_help = (
        "encode on the Ray cluster at ADDRESS ('auto': this machine's), or a local Ray of --ray_workers CPUs; with a "
        "database server (or pgvector) each worker writes what it encodes"
    )
    build.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS", help=ray_help)
    build.add_argument("--ray_workers", type=int, default=2, help="Ray workers, one model each (with --ray)")
    query = commands.add_parser("query", help="search a saved index")
    query.add_argument("--index", required=True, help="a folder written by `build`")
    query.add_argument("--model", default=None, help="default: the model the index was built with")
    direction = query.add_mutually_exclusive_group(required=True)
    direction.add_argument("--entailing", nargs="+", metavar="CLAIM", help="find the stored sentences entailing these")
    direction.add_argument("--entailed_by", nargs="+", metavar="PREMISE", help="find what these entail")
    query.add_argument("-k", type=int, default=5, help="hits per query")
    query.add_argument("--json", action="store_true", help="print the hits as JSON")
    query.add_argument("--allow_model_mismatch", action="store_true", help="search with another --model anyway")
    query.add_argument("--device", default=device)
    return parser


def read_corpus(path: Path, column: str | None) -> list[str]:
    """The distinct non-empty sentences of ``path`` in first-seen order: a ``.txt`` (or ``.txt.gz``) file holds one
    per line, any other file is a table (``read_table``) with the text in ``column``."""
    if path.name.removesuffix(".gz").endswith(".txt"):
        if column is not None:
            raise ValueError(f"--column needs a table corpus (.jsonl/.csv/.tsv/.parquet), got {path}")
        if not path.is_file():
            raise FileNotFoundError(f"--corpus {path}: no such file")
        try:
            with (gzip.open if path.suffix == ".gz" else open)(path, "rt", encoding="utf-8-sig") as handle:
                sentences = handle.read().splitlines()
        except UnicodeDecodeError as error:
            raise ValueError(f"--corpus {path}: not UTF-8 text ({error})") from error
        except (gzip.BadGzipFile, EOFError, zlib.error) as error:  # not gzip, cut short, damaged
            raise ValueError(f"--corpus {path}: not a whole gzip file ({error})") from None
    else:
        table = read_table(path)
        if column is None:
            raise ValueError(f"--corpus {path} is a table: name its text column with --column")
        if column not in table.column_names:
            raise ValueError(f"--corpus {path} has no column {column!r} (columns: {table.column_names})")
        sentences = table[column]
    for row, sentence in enumerate(sentences, start=1):
        if sentence is not None and not isinstance(sentence, str):
            raise ValueError(f"--corpus {path}: row {row} of {column!r} is not text: {sentence!r}")
    distinct = list(dict.fromkeys(sentence.strip() for sentence in sentences if sentence and sentence.strip()))
    if not distinct:
        raise ValueError(f"--corpus {path} holds no sentences")
    return distinct


def database_uri(args: argparse.Namespace) -> str:
    """``--uri`` (default: ``--index`` + the engine's suffix), checked before encoding: outside the index, unused."""
    store = BACKENDS[args.backend].store_class
    uri = args.uri or str(Path(args.index).with_name(Path(args.index).name + store.default_suffix))
    if split_uri(uri)[0] == MEMORY:
        raise ValueError("--uri :memory: does not outlive the command: give a folder, a file or a server URL")
    place = store.local_path(uri)
    if place is not None:
        check_output_location(place, "--uri")
        check_not_nested(place, "--uri", args.index, "--index", "saving the index would replace the database")
    try:  # refused before the corpus is encoded, not after
        store.check_new(store.normalized(uri))
    except (FileExistsError, ValueError) as error:
        raise ValueError(f"--uri {error}") from None
    return uri


def load_search_model(name_or_path: str, device: str) -> GaussCSEModel:
    """The model of ``--model``, its errors naming the flag."""
    try:
        return load_model(name_or_path, device=device)
    except ModelLoadError as error:
        raise ValueError(f"--model {error}") from error


def build_index(args: argparse.Namespace) -> None:
    """``build``: check the output places, read the corpus, encode it (here or on Ray), index it, save the index."""
    check_output_location(args.index, "--index")
    check_replaceable(args.index, SETTINGS_FILE, "--index")
    for flag, path in (("--corpus", args.corpus), ("--model", args.model)):  # read from where the save replaces
        check_not_inside(path, flag, args.index, "--index", "saving the index replaces that folder: move it out first")
    if args.ray is not None and args.ray_workers < 1:
        raise ValueError(f"--ray_workers must be at least 1 (Ray workers, one model each), got {args.ray_workers}")
    index_kwargs = {}
    if BACKENDS[args.backend].database:
        index_kwargs["uri"] = database_uri(args)
    elif args.uri:
        raise ValueError(f"--uri is not for --backend {args.backend}: {uri_usage()}")
    sentences = read_corpus(Path(args.corpus), args.column)
    model = load_search_model(args.model, args.device)
    encoding = {"batch_size": args.batch_size, "max_length": args.max_length}
    ray = {"address": None if args.ray == "local" else args.ray, "num_workers": args.ray_workers, **encoding}
    backend = BACKENDS[args.backend]
    if args.ray is not None and backend.database and backend.store_class.shared(index_kwargs["uri"]):
        # each Ray worker writes what it encodes (a server, or a local PostgreSQL): no Gaussian in this process
        from gausscse.search.ray_encode import write_on_ray

        index = SentenceIndex.empty_index(model, backend=args.backend, score=args.score, **index_kwargs)
        write_on_ray(args.model, sentences, args.backend, index.engine.uri, **ray)
        index.engine.sync()
        corpus = SentenceIndex.of_model(model, index, None)
    else:
        embeddings = None
        if args.ray is not None:
            from gausscse.search.ray_encode import encode_on_ray

            embeddings = encode_on_ray(args.model, sentences, **ray)
        options = {"backend": args.backend, "score": args.score, "embeddings": embeddings, **encoding, **index_kwargs}
        corpus = SentenceIndex.build(model, sentences, **options)
    corpus.save(args.index)
    print(f"indexed {len(corpus)} distinct sentences of {args.corpus} into {args.index} ({corpus.index})")


def query_index(args: argparse.Namespace) -> list[list[dict]]:
    """``query``: check the queries, load the index and its model, search, print the hits and return them."""
    if args.k < 1:
        raise ValueError(f"-k must be a positive integer, got {args.k}")
    direction = "entailing" if args.entailing else "entailed_by"
    queries = getattr(args, direction)
    blank = [index for index, query in enumerate(queries, start=1) if not query.strip()]
    if blank:
        raise ValueError(f"--{direction}: query {blank[0]} is empty; give the sentences to search with")
    corpus = SentenceIndex.load(args.index)
    model_name = args.model or corpus.model_name
    if model_name is None:
        raise ValueError(f"--index {args.index} does not record its model: pass --model")
    if args.model is None and Path(model_name).is_absolute() and not Path(model_name).exists():
        raise FileNotFoundError(f"the model folder {model_name} of --index {args.index} is gone: pass --model")
    model = load_search_model(model_name, args.device)
    search = getattr(corpus, direction)
    try:
        rows = search(model, queries, min(args.k, len(corpus)), allow_model_mismatch=args.allow_model_mismatch)
    except ModelMismatchError as error:
        raise ValueError(f"--model {model_name}: {error}") from None
    hits = [[vars(hit) for hit in row] for row in rows]
    if args.json:
        print(json.dumps(hits, ensure_ascii=False, indent=2))
    else:
        relation = "entail" if args.entailing else "are entailed by"
        for query, row in zip(queries, hits, strict=True):
            print(f"\nSentences that {relation}: {query}")
            for rank, hit in enumerate(row, start=1):
                print(f"{rank:3d}. {hit['score']:.4f}  {hit['sentence']}")
    return hits


def main(argv: list[str] | None = None) -> list[list[dict]] | None:
    """Run a subcommand; ``query`` returns the hits (a list per query of ``{"id", "sentence", "score"}``)."""
    args = build_parser().parse_args(argv)
    return build_index(args) if args.command == "build" else query_index(args)


def run() -> None:
    """Console entry point: errors in the input are printed as one line, without a traceback."""
    try:
        main()
    except (ValueError, FileNotFoundError, FileExistsError, ImportError) as error:  # DataError is a ValueError
        print(f"gausscse-search: error: {error}", file=sys.stderr)
        raise SystemExit(2) from error


if __name__ == "__main__":
    run()
