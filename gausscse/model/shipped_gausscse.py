"""The code files a GaussCSE folder ships beside its weights. transformers finds them by a text search for relative
imports from the modeling file; ``TEXT_SEARCH_LINES`` names the sentence-transformers module (which no model file may
import) for that search only."""

from __future__ import annotations

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
    "utils_gausscse.py",  # files written whole, the weights' fingerprint
    "shipped_gausscse.py",  # this list
)
SENTENCE_TRANSFORMERS_MODULE = "sentence_transformer_gausscse"
# read by transformers' text search for relative imports; text, never run
TEXT_SEARCH_LINES = """
from .sentence_transformer_gausscse import GaussCSETransformer
"""


def copy_shipped_files(folder: str | Path) -> list[Path]:
    """Copy ``SHIPPED_FILES`` from beside this file into ``folder``; returns the paths written."""
    here = Path(__file__).parent
    return [Path(shutil.copyfile(here / name, Path(folder) / name)) for name in SHIPPED_FILES]
