"""The package's shape: layers import downwards only, one pooling and one max-length policy, and `pip install .`
gives a working package with its commands."""

from __future__ import annotations

import ast
import graphlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
import torch
from sentence_transformers.models import Pooling
from transformers import AutoTokenizer, BertConfig, RobertaConfig

from gausscse.cli import COMMANDS
from gausscse.model.encoding_gausscse import pool_tokens, resolve_max_length
from gausscse.model.shipped_gausscse import SENTENCE_TRANSFORMERS_MODULE
from gausscse.model.shipped_gausscse import SHIPPED_FILES as LISTED_FILES

from .helpers import MINILM_PATH

REPO_ROOT = Path(__file__).resolve().parent.parent


def imported_modules(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "statement",
    [
        "import gausscse.data.sources, gausscse.data.tokenize, gausscse.data.registry",
        "import gausscse.training.batch, gausscse.training.losses",
        "import gausscse.training.trainer, gausscse.training.arguments, gausscse.training.save",
    ],
)
def test_data_and_training_do_not_import_evaluation_or_its_heavy_dependencies(statement):
    loaded = imported_modules(statement)
    assert not {name for name in loaded if name.startswith("gausscse.evaluation")}
    # beyond what the model itself loads (transformers' PreTrainedModel pulls scipy in on its own)
    extra = {name.split(".")[0] for name in loaded - imported_modules("import gausscse")}
    assert not {"scipy", "matplotlib", "sklearn", "evaluate"} & extra


def test_the_demo_builds_on_model_data_and_search_only():
    loaded = imported_modules("import gausscse.demo.core")
    assert not {name for name in loaded if name.startswith(("gausscse.evaluation", "gausscse.training", "gradio"))}


PACKAGE_DIR = REPO_ROOT / "gausscse"


def module_name(path: Path) -> str:
    """``gausscse/evaluation/encoders.py`` → ``gausscse.evaluation.encoders`` (a package: its folder's name)."""
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module an ``import`` statement anywhere in ``path`` names (function-level and guarded ones too), relative
    imports resolved, and ``from m import x`` counted as both ``m`` and ``m.x`` (x may be a submodule)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found |= {module, *(f"{module}.{alias.name}" for alias in node.names)}
    return found


def package_files() -> dict[str, Path]:
    """Module name → file of every Python file of the package (the ``evaluate`` modules are loaded by path, not
    imported, and import only ``datasets``/``evaluate``)."""
    return {module_name(path): path for path in sorted(PACKAGE_DIR.rglob("*.py"))}


def is_under(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def test_the_package_has_no_import_cycle():
    """Each module's imports (type-checking ones aside) form no cycle: ``from a.b import c`` is an edge to the module
    ``a.b.c`` where it is one, else to ``a.b``."""
    files = package_files()
    graph = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        typing_only = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        edges = set()
        for node in ast.walk(tree):
            if id(node) in typing_only or not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if isinstance(node, ast.Import):
                edges |= {alias.name for alias in node.names}
                continue
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            edges |= {f"{module}.{alias.name}" if f"{module}.{alias.name}" in files else module for alias in node.names}
        graph[name] = {edge for edge in edges if edge in files and edge != name}
    graphlib.TopologicalSorter(graph).prepare()  # CycleError names the cycle


MAX_FUNCTION_LINES = 80  # a function a newcomer reads at once
MAX_MODEL_FILE_LINES = 450  # modeling_gausscse.py holds the model: forward, heads, similarity API


def test_no_package_function_is_over_80_lines_and_the_model_file_stays_small():
    long_functions = [
        f"{path.relative_to(REPO_ROOT)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in package_files().values()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long_functions == []
    model_file = REPO_ROOT / "gausscse" / "model" / "modeling_gausscse.py"
    assert len(model_file.read_text(encoding="utf-8").splitlines()) <= MAX_MODEL_FILE_LINES


def test_the_package_imports_neither_the_studies_nor_the_benchmarks():
    """``gausscse/`` is what a user of the model runs; ``studies/`` and ``bench/`` build on it, never the reverse."""
    offending = {
        f"{name}: {module}"
        for name, path in package_files().items()
        for module in imports_of(path)
        if is_under(module, "studies") or is_under(module, "bench")
    }
    assert not offending


def test_evaluation_does_not_import_training():
    """Evaluation scores any model; it needs the model, the loader and the data, not the training code (the commands
    in ``gausscse.cli`` compose the two)."""
    offending = {
        f"{name}: {module}"
        for name, path in package_files().items()
        if is_under(name, "gausscse.evaluation")
        for module in imports_of(path)
        if is_under(module, "gausscse.training")
    }
    assert not offending


def test_every_package_module_is_reachable_from_what_a_user_runs():
    """Each module of ``gausscse/`` is imported, directly or not, by ``import gausscse``, a command
    (``[project.scripts]``, ``python -m gausscse....``) or the root scripts (``app.py``, ``train_gausscse.py``):
    code only the studies, benchmarks or tests use lives with them, outside the package."""
    files = package_files()
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    roots = {"gausscse", *(target.split(":")[0] for target in scripts.values())}
    roots |= {target.split(":")[0] for target, _ in COMMANDS.values()}  # imported by name when a script runs
    roots |= {name for name in files if name.endswith(".__main__")}
    roots |= {module for script in ("app.py", "train_gausscse.py") for module in imports_of(REPO_ROOT / script)}
    # imported by name, not by an import statement: GaussCSEModel.as_sentence_transformer (and a folder's modules.json)
    roots.add(f"gausscse.model.{SENTENCE_TRANSFORMERS_MODULE}")
    reached, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in reached or name not in files:
            continue
        reached.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:end]) for end in range(1, len(parts))]  # importing a module runs its packages
        todo += imports_of(files[name])
    evaluate_modules = {name for name in files if ".evaluate_modules." in name}  # loaded by path (metrics.py)
    assert set(files) - evaluate_modules - reached == set()


MODEL_DIR = REPO_ROOT / "gausscse" / "model"
SHIPPED_FILES = {
    "modeling_gausscse.py",
    "configuration_gausscse.py",
    "gaussian.py",
    "sentence_transformer_gausscse.py",  # the sentence-transformers module
    "onnx_gausscse.py",  # ONNX export and the ONNX Runtime session of backend="onnx"
    "encoding_gausscse.py",  # the encode loop, the truncation policy and the poolings
    "devices_gausscse.py",  # where encode's forward passes run: the model's device, or worker processes
    "backbone_gausscse.py",  # the encoder a model starts from
    "adapters_gausscse.py",  # the adapter-folder layout
    "utils_gausscse.py",  # files written whole, the weights' fingerprint
    "shipped_gausscse.py",  # the list of these files
}


def test_the_model_files_import_only_torch_transformers_and_each_other():
    allowed = {"torch", "transformers", "tqdm", "__future__", "inspect", "collections", "dataclasses", "typing"}
    allowed |= {"json", "os", "pathlib"}  # the config writes the sentence-transformers files
    allowed |= {"tempfile"}  # an adapter folder's peft files are written in a scratch folder first
    allowed |= {"shutil"}  # a full save removes the adapter/ folder an earlier adapter save left
    allowed |= {"copy", "math"}  # the frozen μ path copies the encoder; σ² = 1/d at the identity start
    allowed |= {"importlib"}  # ONNX Runtime's quantisation module, imported where int8 is asked for
    allowed |= {"hashlib", "io", "weakref"}  # the model fingerprint (kept per model) an ONNX graph records
    allowed |= {"huggingface_hub"}  # a transformers dependency: a Hub backbone's sentence-transformers pooling file
    allowed |= {"safetensors"}  # a transformers dependency: the heads file of an adapter folder
    allowed |= {"numpy"}  # a transformers dependency: ONNX Runtime's inputs and outputs, encode's padding
    allowed |= {"itertools", "functools", "concurrent", "contextlib"}  # encode pads ahead of the forward (a thread)
    allowed |= {"multiprocessing", "traceback"}  # encode on several devices: worker processes (concurrent.futures)
    allowed |= {"sys"}  # the workers re-import the main module: sys.modules["__main__"] is checked first
    allowed |= {"time", "uuid"}  # a load waits while a save moves its files in; each save marks its own id
    optional = {"peft", "onnxruntime"}  # in try blocks (transformers' import check skips them): adapters, ONNX only
    for path in MODEL_DIR.glob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if line.lstrip().startswith(("import ", "from ")) and not words[1].startswith("."):
                module = words[1].split(".")[0]
                assert module in allowed | optional | (
                    {"sentence_transformers"} if path.name == "sentence_transformer_gausscse.py" else set()
                ), f"{path.name}: {line}"


def test_the_shipped_files_are_the_model_code_and_need_no_sentence_transformers_to_load_with_automodel():
    """What transformers copies beside the weights and into its module cache, and downloads from a Hub repo (the
    modeling file and its relative imports by its text search, recursively), is the shipped files, the list
    save_pretrained copies too (shipped_gausscse.SHIPPED_FILES); transformers' import check of each (run for Hub
    repos) passes without sentence-transformers, peft or ONNX Runtime."""
    assert set(LISTED_FILES) == SHIPPED_FILES == {path.name for path in MODEL_DIR.glob("*.py")} - {"__init__.py"}
    modeling = MODEL_DIR / "modeling_gausscse.py"
    code = (
        "import sys, json\nsys.modules['sentence_transformers'] = sys.modules['peft'] = None\n"
        "sys.modules['onnxruntime'] = None\n"
        "from transformers.dynamic_module_utils import check_imports, get_relative_import_files\n"
        f"files = [{str(modeling)!r}, *get_relative_import_files({str(modeling)!r})]\n"
        "for name in files:\n    check_imports(name)\n"
        "print(json.dumps(sorted(name.rsplit('/', 1)[-1] for name in files)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(json.loads(done.stdout.strip().splitlines()[-1])) == SHIPPED_FILES


def test_the_model_files_import_no_cycle_and_the_model_not_the_sentence_transformers_module():
    """The shipped files' imports (statements anywhere, function-level ones too) form no cycle: the
    sentence-transformers module imports the model, never the reverse (``as_sentence_transformer`` finds it by name
    at call time)."""
    files = {name: path for name, path in package_files().items() if path.parent == MODEL_DIR}
    files.pop("gausscse.model")  # the package imports every module; none imports it
    graph = {name: {module for module in imports_of(path) if module in files} for name, path in files.items()}
    assert "gausscse.model.modeling_gausscse" in graph["gausscse.model.sentence_transformer_gausscse"]
    for start in graph:
        reached, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name not in reached:
                reached.add(name)
                todo += graph[name]
        assert start not in reached, f"{start} imports itself through {sorted(reached)}"


@pytest.mark.parametrize("pooling", ["cls", "mean", "max"])
def test_pool_tokens_matches_sentence_transformers_pooling(pooling):
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 8)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    reference = Pooling(8, pooling_mode=pooling)({"token_embeddings": hidden, "attention_mask": mask})
    torch.testing.assert_close(pool_tokens(hidden, mask, pooling), reference["sentence_embedding"])
    with pytest.raises(ValueError, match=r"pooling must be one of \('cls', 'mean', 'max'\), got 'first'"):
        pool_tokens(hidden, mask, "first")


def test_one_max_length_policy_capped_at_the_encoders_limit():
    tokenizer = AutoTokenizer.from_pretrained(MINILM_PATH)  # model_max_length 512 (BERT)
    bert = BertConfig(max_position_embeddings=128)
    assert resolve_max_length(tokenizer, bert) == 128  # default: all the encoder takes
    assert resolve_max_length(tokenizer, bert, 64) == 64
    assert resolve_max_length(tokenizer, bert, 1000) == 128
    roberta = RobertaConfig(max_position_embeddings=514, pad_token_id=1)  # positions start at pad_token_id + 1
    assert resolve_max_length(tokenizer, roberta, 4096) == 512
    tokenizer.model_max_length = int(1e30)  # "no limit" sentinel: the positions decide
    assert resolve_max_length(tokenizer, roberta) == 512
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="max_length must be a positive integer"):
            resolve_max_length(tokenizer, bert, bad)


def test_pip_install_gives_the_package_and_its_commands(tmp_path):
    """Build the wheel, install it into a folder of its own, and use it from outside the checkout with the editable
    install of the checkout shadowed."""
    source = tmp_path / "source"  # a copy of what the package is built from, so the checkout gets no build/ folder
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO_ROOT / name, source / name)
    shutil.copytree(REPO_ROOT / "gausscse", source / "gausscse", ignore=shutil.ignore_patterns("__pycache__"))
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), "."]
    subprocess.run(build, cwd=source, check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = wheels.glob("gausscse-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(name for name in names if name.endswith("/METADATA"))).decode()
        entry_points = archive.read(next(name for name in names if name.endswith("/entry_points.txt"))).decode()
    assert {name.split("/")[0] for name in names if not name.startswith("gausscse-")} == {"gausscse"}
    assert "gausscse/evaluation/evaluate_modules/binary_nli/binary_nli.py" in names
    assert "gausscse/hub/model_card_template.md" in names  # package data
    for requirement in ("torch", "transformers", "datasets", "evaluate", "accelerate", "peft", "scipy"):
        assert f"Requires-Dist: {requirement}" in metadata
    for command in ("train", "evaluate", "precision", "search", "demo"):
        assert f"gausscse-{command} = gausscse.cli:run_{command}" in entry_points

    site = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)]
    subprocess.run(install, check=True, capture_output=True, text=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    code = "import gausscse, gausscse.cli.train, gausscse.cli.evaluate; print(gausscse.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr[-2000:]
    assert where.stdout.strip().startswith(str(site))
    for command in ("gausscse-train", "gausscse-evaluate"):
        done = subprocess.run(
            [str(site / "bin" / command), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0 and f"usage: {command}" in done.stdout, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("script", "missing", "extra"),
    [("gausscse-search", "datasets", "search"), ("gausscse-evaluate", "matplotlib", "train"),
     ("gausscse-demo", "gradio", "demo")],
)  # fmt: skip
def test_a_command_whose_extra_is_missing_names_it_in_one_line(script, missing, extra):
    """As after a plain ``pip install .``: the command's extra is not installed (its module blocked here)."""
    name = script.removeprefix("gausscse-")
    code = (
        f"import sys; sys.modules[{missing!r}] = None; sys.argv = [{script!r}, '--help']\n"
        f"from gausscse.cli import run_{name}; run_{name}()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"{script}: error: {missing} is not installed: pip install 'gausscse[{extra}]'"


def test_every_search_backend_class_is_written_out_in_its_module():
    """No class made at run time (``type(...)``): each backend's class statement is in its module's source, so a
    search for ``class QdrantHnsw`` finds it."""
    import inspect

    from gausscse.search.backends import BACKENDS

    for name, backend in BACKENDS.items():
        source = inspect.getsource(backend)  # OSError for a class made by type(): no source of its own
        assert source.startswith(f"class {backend.__name__}(") and f'backend="{name}"' in source, name
        assert f"class {backend.__name__}(" in Path(inspect.getfile(backend)).read_text(encoding="utf-8")
