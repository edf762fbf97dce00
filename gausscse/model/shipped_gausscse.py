"""The code files a GaussCSE folder ships beside its weights (Hub custom code), and how each of them gets there.

Saving: ``GaussCSEModel.save_pretrained`` copies ``SHIPPED_FILES`` from beside this file into the folder
([`copy_shipped_files`]), after transformers' own ``custom_object_save`` (which copies the modeling file and the files
it imports relatively).

Loading: transformers finds the code of a folder or Hub repo loaded with ``trust_remote_code=True`` by a text search
for relative-import lines (``dynamic_module_utils.get_relative_imports``), from the modeling file on: it copies those
files into its module cache (a folder) or downloads them (a Hub repo). The sentence-transformers module must come too
(``GaussCSEModel.as_sentence_transformer`` and a later ``save_pretrained`` take it from beside the modeling file), but
no model file may import it: it imports the model, so that import would be a cycle, and it would make
sentence-transformers a requirement of ``AutoModel``. The line of ``TEXT_SEARCH_LINES`` names it for that text search
only: a string, never run. (``modeling_gausscse.py`` imports the other files, and this one, for real.)
tests/test_structure.py checks that the text search from the modeling file finds exactly ``SHIPPED_FILES``.
"""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

SHIPPED_FILES = (
    "configuration_gausscse.py",  # GaussCSEConfig; it writes the sentence-transformers files (modules.json, ...)
    "modeling_gausscse.py",  # GaussCSEModel: forward, heads, similarity API
    "gaussian.py",  # the Gaussian math
    "encoding_gausscse.py",  # the encode loop, the truncation policy and the poolings
    "devices_gausscse.py",  # where encode's forward passes run: the model's device, or worker processes on several
    "backbone_gausscse.py",  # the encoder a model starts from
    "adapters_gausscse.py",  # the adapter-folder layout (LoRA saved unmerged)
    "onnx_gausscse.py",  # ONNX export and the ONNX Runtime sessions of backend="onnx"
    "sentence_transformer_gausscse.py",  # the sentence-transformers module (modules.json names it)
    "shipped_gausscse.py",  # this list
)
SENTENCE_TRANSFORMERS_MODULE = "sentence_transformer_gausscse"
# transformers' text search for relative imports reads this line; it is text, not an import (module docstring)
TEXT_SEARCH_LINES = """
from .sentence_transformer_gausscse import GaussCSETransformer
"""


def copy_shipped_files(folder: str | Path) -> list[Path]:
    """Copy every file of ``SHIPPED_FILES`` from beside this file into ``folder``; returns the paths written. A file
    missing here is a ``FileNotFoundError``: a folder saved without it would not load everywhere."""
    here = Path(__file__).parent
    written = []
    for name in SHIPPED_FILES:
        written.append(Path(shutil.copyfile(here / name, Path(folder) / name)))
    return written


def sentence_transformers_module():
    """The sentence-transformers module shipped beside this file, imported by name when first asked for (this copy
    of the code: the installed package's, or a folder's in transformers' module cache)."""
    return importlib.import_module(f".{SENTENCE_TRANSFORMERS_MODULE}", __package__)


__all__ = ["SHIPPED_FILES", "copy_shipped_files", "sentence_transformers_module"]
