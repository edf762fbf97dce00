"""Every dotted ``gausscse.…`` name and every repository path written in README.md, CHANGELOG.md's unreleased part
and the package's docstrings and comments resolves to something that exists: documentation cannot keep naming a
module or function after it moved."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOTTED = re.compile(r"(?<![\w./-])gausscse(?:\.[A-Za-z_]\w*)+")
# a name written relative to the package, in code quotes: ``training.batch.TripletCollator``, [`data.sources.x`]
SUBPACKAGES = "model|data|training|evaluation|search|demo|cli|io|loading"
RELATIVE = re.compile(rf"`((?:{SUBPACKAGES})(?:\.[A-Za-z_]\w*)+)(?:\(\))?`")
PATH = re.compile(r"(?<![\w./-])(?:gausscse|studies|bench|scripts|tests|configs)/[\w./-]*\w")


def resolves(name: str) -> bool:
    """Whether ``name`` is a module, or an attribute (chain) of the longest importable module prefix."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            target = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(target, attribute):
                return False
            target = getattr(target, attribute)
        return True
    return False


def documents() -> dict[str, str]:
    """README.md and every Python file of the package (docstrings and comments are part of the text)."""
    texts = {"README.md": (ROOT / "README.md").read_text(encoding="utf-8")}
    for path in sorted((ROOT / "gausscse").rglob("*.py")):
        texts[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    return texts


def test_every_dotted_gausscse_name_resolves():
    unresolved = {
        f"{where}: {name}"
        for where, text in documents().items()
        for name in DOTTED.findall(text)
        if not resolves(name.rstrip("."))
    }
    assert not unresolved, sorted(unresolved)


FILE_SUFFIXES = (".png", ".json", ".md", ".py", ".safetensors", ".yaml", ".txt", ".csv", ".jsonl")


def package_relative(name: str) -> bool:
    """Whether a quoted dotted name means a place in the package: not a file name, and ``model.x`` only when x is a
    module of ``gausscse.model`` (``model.encode``, ``model.config`` are a model object's attributes)."""
    if name.endswith(FILE_SUFFIXES):
        return False
    first, second = name.split(".")[:2]
    return first != "model" or (ROOT / "gausscse" / "model" / f"{second}.py").is_file()


def test_every_package_relative_name_in_code_quotes_resolves():
    unresolved = {
        f"{where}: {name}"
        for where, text in documents().items()
        for name in RELATIVE.findall(text)
        if package_relative(name) and not resolves(f"gausscse.{name}")
    }
    assert not unresolved, sorted(unresolved)


def test_every_repository_path_in_the_readme_exists():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = {path for path in PATH.findall(text) if not (ROOT / path).exists() and not any(ROOT.glob(path))}
    assert not missing, sorted(missing)


@pytest.mark.parametrize("name", ["gausscse.search.nothing_here", "gausscse.nowhere.module"])
def test_a_name_that_does_not_exist_is_caught(name):
    assert not resolves(name)
