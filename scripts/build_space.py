"""Assemble the demo as a Hugging Face Space folder, and optionally upload it.

    python scripts/build_space.py --output outputs/space
    python scripts/build_space.py --output outputs/space --space_id you/gausscse-demo --model you/gausscse-minilm

The folder holds ``README.md`` (``space/README.md``: the Space metadata, ``sdk: gradio`` at the pinned version),
``app.py``, the ``gausscse`` package and a ``requirements.txt`` with the pins of the repository's own for what the app
imports (the Space installs Gradio itself, from ``sdk_version``). With ``--space_id`` it creates the Space, uploads
the folder and sets the Space variable ``GAUSSCSE_MODEL`` to ``--model``.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from huggingface_hub import HfApi

from gausscse.io import write_atomic

REPO_ROOT = Path(__file__).resolve().parent.parent
# What the demo imports at run time (gausscse.model, .data.registry, .search, .drawing); gradio comes from sdk_version.
SPACE_PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "safetensors",
    "huggingface_hub",
    "datasets",
    "numpy",
    "matplotlib",
    "PyYAML",
    "tqdm",
)


def pinned_requirements(names: tuple[str, ...] = SPACE_PACKAGES) -> list[str]:
    """The ``name==version`` lines of the repository's requirements.txt for ``names``, in that order."""
    pins = {}
    for line in (REPO_ROOT / "requirements.txt").read_text(encoding="utf-8").splitlines():
        requirement = line.split("#", 1)[0].strip()
        if "==" in requirement:
            pins[requirement.split("==", 1)[0]] = requirement
    missing = [name for name in names if name not in pins]
    if missing:
        raise ValueError(f"requirements.txt pins no version of {', '.join(missing)}")
    return [pins[name] for name in names]


def build_space(output: Path) -> Path:
    """Write the Space folder ``output`` (replaced if it exists) and return it."""
    if output.exists():
        shutil.rmtree(output)
    output.mkdir(parents=True)
    shutil.copy2(REPO_ROOT / "space" / "README.md", output / "README.md")
    shutil.copy2(REPO_ROOT / "app.py", output / "app.py")
    shutil.copytree(REPO_ROOT / "gausscse", output / "gausscse", ignore=shutil.ignore_patterns("__pycache__"))
    write_atomic(output / "requirements.txt", "\n".join(pinned_requirements()) + "\n")
    return output


def upload_space(folder: Path, space_id: str, model: str, token: str | None = None) -> str:
    """Create the Space (Gradio SDK) if needed, upload ``folder`` and set ``GAUSSCSE_MODEL``; return the commit URL."""
    api = HfApi(token=token)
    api.create_repo(space_id, repo_type="space", space_sdk="gradio", exist_ok=True)
    api.add_space_variable(space_id, "GAUSSCSE_MODEL", model)
    commit = api.upload_folder(
        folder_path=str(folder), repo_id=space_id, repo_type="space", commit_message="Upload the GaussCSE demo"
    )
    return str(commit)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "outputs" / "space")
    parser.add_argument("--space_id", help="upload to this Space (user/name)")
    parser.add_argument("--model", help="the Hub model id the Space runs on (GAUSSCSE_MODEL); needed with --space_id")
    args = parser.parse_args(argv)
    if args.space_id and not args.model:
        parser.error("--space_id needs --model: the Hub id of the GaussCSE model the Space runs on")
    folder = build_space(args.output)
    print(f"Space folder: {folder}")
    if args.space_id:
        print(f"uploaded: {upload_space(folder, args.space_id, args.model)}")


if __name__ == "__main__":
    main()
