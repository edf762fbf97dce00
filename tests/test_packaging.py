"""Packaging: the core install loads, encodes and searches; extras hold the rest; one version everywhere."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import tomllib
from transformers import AutoTokenizer

import gausscse

from .helpers import MINILM_PATH, run_fresh_python, tiny_model

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def distribution_name(requirement: str) -> str:
    """``"faiss-cpu>=1.9; extra == 'x'"`` → ``"faiss-cpu"`` (normalised: lower case, ``_``/``.`` → ``-``)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0)).lower()


def dependency_closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they require (installed ones, extras not taken), transitively."""
    closure, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in closure:
            continue
        closure.add(name)
        try:
            requirements = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [distribution_name(req) for req in requirements if "extra ==" not in req]
    return closure


def extra_only_modules() -> set[str]:
    """Import names of the distributions the extras add and the core install does not bring (directly or not)."""
    core = dependency_closure({distribution_name(req) for req in PYPROJECT["project"]["dependencies"]})
    extras = {
        distribution_name(req)
        for name, requirements in PYPROJECT["project"]["optional-dependencies"].items()
        if name != "dev"
        for req in requirements
        if not req.startswith("gausscse")
    }
    modules_of = metadata.packages_distributions()
    return {
        module
        for module, distributions in modules_of.items()
        if any(distribution_name(d) in extras - core for d in distributions) and not module.startswith("_")
    }


def test_the_version_is_one_string_in_the_package_and_its_metadata():
    assert gausscse.__version__ == metadata.version("gausscse")
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gausscse.__version__"}


def test_extras_are_the_ones_users_are_told_about():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"train", "search", "st", "demo", "all"} <= set(extras)
    assert {distribution_name(req) for req in extras["st"]} == {"sentence-transformers"}
    assert "gradio" in {distribution_name(req) for req in extras["demo"]}


def test_the_core_install_loads_encodes_and_searches_without_any_extra(tmp_path):
    """In a fresh process where every module of an extra-only distribution (datasets, evaluate, scipy, matplotlib,
    faiss, sentence-transformers, gradio, ...) fails to import, a saved folder loads, encodes and is searched."""
    blocked = extra_only_modules()
    assert {"datasets", "matplotlib", "faiss", "sentence_transformers", "gradio"} <= blocked
    model = tiny_model()
    model.get_tokenizer(AutoTokenizer.from_pretrained(MINILM_PATH))
    model.save_pretrained(tmp_path / "model")  # with its tokenizer
    code = f"""
import sys
for name in {sorted(blocked)!r}:
    sys.modules[name] = None  # an extra that is not installed
sys.modules.pop("gausscse", None)
from gausscse.loading import load_model
from gausscse.search import GaussianIndex
model = load_model({str(tmp_path / "model")!r})
index = GaussianIndex(model.config.embedding_size, model.config.similarity_reduction)
index.add(model.encode(["a man plays a guitar", "a woman cuts a tomato"]))
scores, ids = index.entailing(model.encode(["a man plays music"]), k=2)
print(sorted(ids[0].tolist()))
"""
    assert run_fresh_python(code, tmp_path).strip().splitlines()[-1] == "[0, 1]"
