"""``gausscse-train --help``: GaussCSE's own flags first, in their groups, then transformers' TrainingArguments."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from transformers import TrainingArguments

from gausscse.cli import train as train_cli
from gausscse.training.arguments import (
    ARGUMENT_CLASSES,
    DataArguments,
    GaussCSETrainingArguments,
    ModelArguments,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TRANSFORMERS_GROUP = "transformers TrainingArguments (all of them)"
GAUSSCSE_GROUPS = ("Model", "Data", "GaussCSE training")
# TrainingArguments flags (some with GaussCSE defaults): listed once, in the transformers group only
TRANSFORMERS_FLAGS = ("learning_rate", "per_device_train_batch_size", "num_train_epochs", "seed", "bf16", "output_dir")


def init_names(cls) -> list[str]:
    return [item.name for item in fields(cls) if item.init]


GROUP_FIELDS = {
    "Model": init_names(ModelArguments),
    "Data": init_names(DataArguments),
    "GaussCSE training": [
        name for name in init_names(GaussCSETrainingArguments) if name not in set(init_names(TrainingArguments))
    ],
}


def help_text(monkeypatch, capsys, prog: str = "gausscse-train", argv: tuple[str, ...] = ("--help",)) -> str:
    """What ``prog *argv`` prints, run in-process through the console-script entry point; it must exit 0."""
    monkeypatch.setattr(sys, "argv", [prog, *argv])
    with pytest.raises(SystemExit) as stopped:
        train_cli.run()
    assert stopped.value.code == 0
    return capsys.readouterr().out


def sections(text: str) -> dict[str, str]:
    """The help's sections (``title:`` lines at the left margin) → their text, in order."""
    parts = re.split(r"^(\S[^\n]*):\n", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def flag_entries(text: str, name: str) -> list[str]:
    """The help entries of ``--name`` (its line at the entries' indentation)."""
    return re.findall(rf"^  --{re.escape(name)}(?=[ ,\n]|$)", text, flags=re.MULTILINE)


def test_gausscse_groups_come_first_and_hold_their_flags(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys)
    found = sections(text)
    titles = list(found)
    for title in (*GAUSSCSE_GROUPS, TRANSFORMERS_GROUP):
        assert title in titles, f"no {title!r} group in --help (groups: {titles})"
    order = [titles.index(title) for title in (*GAUSSCSE_GROUPS, TRANSFORMERS_GROUP)]
    assert order == sorted(order), f"GaussCSE groups must come before the TrainingArguments one: {titles}"
    for title, names in GROUP_FIELDS.items():
        assert names
        for name in names:
            assert flag_entries(found[title], name), f"--{name} is not in the {title!r} group"
            assert len(flag_entries(text, name)) == 1, f"--{name} is listed more than once"
    transformers_start = text.index(f"\n{TRANSFORMERS_GROUP}:\n")
    for name in TRANSFORMERS_FLAGS:
        assert flag_entries(found[TRANSFORMERS_GROUP], name), f"--{name} is not in the TrainingArguments group"
        assert not flag_entries(text[:transformers_start], name), f"--{name} is listed before the TrainingArguments"
    # every flag of the parser is listed, once, in one group
    every = {name for cls in ARGUMENT_CLASSES for name in init_names(cls)}
    assert sum(len(flag_entries(body, name)) for body in found.values() for name in every) == len(every)


def test_help_starts_with_a_short_usage_and_the_example_commands(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys)
    lines = text.splitlines()
    assert lines[0] == "usage: gausscse-train [CONFIG.yaml|CONFIG.json] [--flag VALUE ...]"
    top = "\n".join(lines[:30])
    assert "gausscse-train configs/quickstart.yaml" in top
    assert "accelerate launch train_gausscse.py" in top
    assert "(default: None). (default: None)" not in text


def test_train_script_prints_the_same_help(monkeypatch, capsys):
    """The root script run as a program (its ``__main__`` block), in a fresh process, at the same width."""
    monkeypatch.setenv("COLUMNS", "100")
    console = help_text(monkeypatch, capsys, prog="train_gausscse.py")
    done = subprocess.run(
        [sys.executable, "train_gausscse.py", "-h"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == console


def test_help_after_a_config_file_shows_its_values_as_defaults(monkeypatch, capsys):
    text = help_text(monkeypatch, capsys, argv=(str(REPO_ROOT / "configs/quickstart.yaml"), "--help"))
    learning_rate = sections(text)[TRANSFORMERS_GROUP].split("  --learning_rate", 1)[1].split("\n  --", 1)[0]
    assert "(default: 0.0001)" in " ".join(learning_rate.split())  # the config's 1.0e-4, not GaussCSE's 3e-5


def action_signature(parser) -> list[tuple]:
    """What parsing uses of each action (its type by name: choice types are made afresh per parser)."""
    return [
        (
            *(tuple(action.option_strings), action.dest, repr(action.default), getattr(action.type, "__name__", None)),
            *(action.nargs, action.const, tuple(action.choices or ()), action.required, type(action).__name__),
        )
        for action in parser._actions
    ]


def test_help_parser_has_exactly_the_flags_parse_arguments_parses():
    from gausscse.training.arguments import ArgumentParser, build_parser

    assert action_signature(build_parser()) == action_signature(ArgumentParser(ARGUMENT_CLASSES))


class Parsed(Exception):
    pass


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--loss", "ent", "--temperature", "0.1", "--learning_rate", "1e-4", "--hub_model_id", "me/model"],
        ["--head_learning_rate", "1e-3", "--bf16", "--train_datasets", "snli", "--no_load_best_model_at_end"],
        [str(REPO_ROOT / "configs/paper.yaml"), "--hub_strategy", "end"],
    ],
)
def test_arguments_without_help_go_to_parse_arguments_as_given(argv, monkeypatch):
    seen = []

    def record(args):
        seen.append(list(args))
        raise Parsed

    monkeypatch.setattr(train_cli, "parse_arguments", record)
    with pytest.raises(Parsed):
        train_cli.main(argv)
    assert seen == [argv]


def test_the_flags_a_resume_must_keep_are_those_marked_on_their_fields():
    """run_fixed_flags: the fields marked FIXES_RUN, the model's own settings and transformers' run-fixing fields —
    what a run trains, never how long, where or how often it saves, evaluates or logs; the marker reaches neither
    argparse nor the help."""
    from gausscse.training.arguments import FIXES_RUN, MODEL_FIELDS, build_parser, run_fixed_flags

    fixed = run_fixed_flags()
    for name in ("loss", "learning_rate", "retrieval_kl_weight", "pack_sequences", "seed", "bf16", *MODEL_FIELDS):
        assert name in fixed, name
    for name in ("max_steps", "num_train_epochs", "output_dir", "eval_steps", "save_steps", "logging_steps"):
        assert name not in fixed, name
    marked = [item.name for cls in ARGUMENT_CLASSES for item in fields(cls) if item.metadata.get(FIXES_RUN)]
    assert len(marked) >= 25 and set(marked) <= set(fixed)
    assert FIXES_RUN not in build_parser().format_help()
