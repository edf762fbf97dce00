"""Whatever a user shares loads everywhere: every writer × every reader, outside the checkout; push_to_hub checked
without a network; remote code only on request.

Writers: the training output, its ``checkpoint-N``, a LoRA run merged and unmerged (and its adapter checkpoint),
``save_pretrained`` of a model loaded with ``AutoModel``, ``model.push_to_hub``, ``gausscse-train --push_to_hub`` and
``as_sentence_transformer().save``. Readers: ``AutoModel`` and ``SentenceTransformer`` with ``trust_remote_code``, in
fresh processes where the gausscse package cannot be imported (only the folders' own code runs), and the installed
package's three entry points, ``gausscse-evaluate``, ``gausscse-search build`` and the demo's loader, one after the
other. Each reader is one fresh process that loads every writer's folder in turn (a process per reader, not per cell,
keeps the matrix inside CI's time; no writer ran in it). Every reader must give the same Gaussians, copies the
Gaussians of what they copy, and the trained models not those of an untrained one; weights that do not fit are
refused (transformers alone would start them at random, identically in every process: the default seed is fixed, so
agreement alone would not show it).
Pushed folders also load by Hub id, from a Hub cache laid out as a download leaves it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

import pytest
import torch
from huggingface_hub import HfApi, ModelCard
from huggingface_hub.errors import EntryNotFoundError
from peft import PeftModel
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoTokenizer

import train_gausscse
from gausscse import GaussCSEModel
from gausscse.evaluation.encoders import load_encoder
from gausscse.loading import ModelLoadError, load_model
from gausscse.training.lora import apply_lora, save_adapter_folder, save_base
from gausscse.training.save import HubPushError, check_hub_push

from ..helpers import final_save, fresh_env, train_args

SENTENCES = ["a man is playing a red guitar in a crowded park at noon", "a man is playing music"]

READERS = ("automodel", "sentence_transformers", "gausscse_evaluate", "gausscse_search", "demo")
WRITERS = (
    "training_output",
    "checkpoint",
    "lora_merged",
    "lora_unmerged",
    "lora_checkpoint",
    "loaded_save_pretrained",
    "model_push_to_hub",
    "train_push_to_hub",
    "lora_push_to_hub",
    "sentence_transformer_save",
)
# A reader's code: ``read(folder)`` gives the μ and log σ² of SENTENCES (and what else it checked); READ_EACH runs it
# on every folder of FOLDERS (name -> folder), each in its own working directory, and prints the results (or the
# error) as JSON on its last line, exiting 1 if any folder failed.
AUTOMODEL_READER = """
import sys
sys.modules["gausscse"] = None  # only the folders' own code
from transformers import AutoModel

def read(folder):
    embeddings = AutoModel.from_pretrained(folder, trust_remote_code=True).encode(SENTENCES)
    return {"mu": embeddings.mu.tolist(), "logvar": embeddings.logvar.tolist()}
"""
SENTENCE_TRANSFORMERS_READER = """
import sys
sys.modules["gausscse"] = None  # only the folders' own code
from sentence_transformers import SentenceTransformer

def read(folder):
    st = SentenceTransformer(folder, trust_remote_code=True)
    features = st.encode(SENTENCES, output_value=None)
    query = st.encode_query(SENTENCES)
    dim, searching = len(features[0]["mu"]), st[0].model.config.search_kl_weight is not None
    assert query.shape[1] == (3 if searching else 2) * dim + 2, query.shape  # the search score's maps, or the KL's
    return {"mu": [f["mu"].tolist() for f in features], "logvar": [f["logvar"].tolist() for f in features]}
"""
GAUSSCSE_READERS = """
from gausscse.cli.evaluate import main as evaluate
from gausscse.cli.search import main as search
from gausscse.demo.core import direction, load_model

def read(folder):
    evaluate(["--model", folder, "--tasks", "direction", "--max_examples", "8", "--no_plots", "--output", "evaluation"])
    Path("corpus.txt").write_text("\\n".join(SENTENCES) + "\\n")
    search(["build", "--model", folder, "--corpus", "corpus.txt", "--index", "index"])
    model = load_model(folder)
    direction(model, *SENTENCES)  # the demo's Direction tab
    embeddings = model.encode(SENTENCES)
    return {
        "evaluation": json.loads(Path("evaluation/results.json").read_text()),
        "indexed": len(Path("index/sentences.jsonl").read_text().splitlines()),
        "mu": embeddings.mu.tolist(),
        "logvar": embeddings.logvar.tolist(),
    }
"""
READ_EACH = """
import json, os, sys, traceback
from pathlib import Path
SENTENCES, FOLDERS = {sentences!r}, {folders!r}
{reader}
results, home = {{}}, Path.cwd()
for name, folder in FOLDERS.items():
    (home / name).mkdir(exist_ok=True)
    os.chdir(home / name)
    try:
        results[name] = read(folder)
    except Exception:
        results[name] = {{"error": traceback.format_exc()}}
        print(name, results[name]["error"], file=sys.stderr)
print(json.dumps(results))
sys.exit(any("error" in result for result in results.values()))
"""


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=fresh_env(cwd), capture_output=True, text=True, timeout=300)


def python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return run([sys.executable, "-c", code], cwd)


def last_json(done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def reader_code(reader: str, folders: dict[str, str | Path]) -> str:
    """The code of one fresh process that loads every folder of ``folders`` with ``reader`` (``automodel``,
    ``sentence_transformers`` or ``gausscse``: the three installed entry points) in turn."""
    code = {"automodel": AUTOMODEL_READER, "sentence_transformers": SENTENCE_TRANSFORMERS_READER}.get(
        reader, GAUSSCSE_READERS
    )
    folders = {name: str(folder) for name, folder in folders.items()}
    return READ_EACH.format(sentences=SENTENCES, folders=folders, reader=code)


def read_each(reader: str, folders: dict[str, Path], cwd: Path) -> dict[str, dict | Exception]:
    """What ``reader`` computed for each of ``folders`` in one fresh process in ``cwd`` (outside the checkout); a folder
    it could not read maps to an ``AssertionError`` carrying the reader's traceback."""
    cwd.mkdir(parents=True, exist_ok=True)
    done = python(reader_code(reader, folders), cwd)
    try:
        results = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        results = {name: {"error": done.stderr[-3000:]} for name in folders}
    return {
        name: AssertionError(f"{reader} cannot read {name}:\n{result['error']}") if "error" in result else result
        for name, result in results.items()
    }


class CapturedCommit:
    """Stand-ins for the Hub calls of an upload: ``create_repo`` and ``whoami`` answer as the Hub would, and the
    operations handed to ``create_commit`` are written into ``folder`` (what the Hub repo would hold)."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.operations: list[str] = []

    def create_commit(self, api: HfApi, repo_id: str, operations, **kwargs):
        for operation in operations:
            target = self.folder / operation.path_in_repo
            target.parent.mkdir(parents=True, exist_ok=True)
            source = operation.path_or_fileobj
            if isinstance(source, (str, Path)):
                shutil.copyfile(source, target)
            else:
                target.write_bytes(source if isinstance(source, bytes) else source.read())
            self.operations.append(operation.path_in_repo)
        return f"https://huggingface.co/{repo_id}/commit/0"

    def patches(self):
        captured = self

        def create_commit(api, repo_id, operations, **kwargs):
            return captured.create_commit(api, repo_id, operations, **kwargs)

        def create_repo(api, repo_id, **kwargs):
            return mock.Mock(repo_id=repo_id)

        return [
            mock.patch.object(HfApi, "create_commit", create_commit),
            mock.patch.object(HfApi, "create_repo", create_repo),
            mock.patch("huggingface_hub.constants.HF_HUB_OFFLINE", False),  # the suite runs offline; this is a push
            mock.patch.object(HfApi, "whoami", lambda api, *args, **kwargs: {"name": "me", "orgs": []}),
            mock.patch.object(HfApi, "_validate_yaml", lambda api, content, **kwargs: None),  # the Hub checks cards
            # with hf_xet, upload_folder streams the same operations through its pipeline: take the one-commit path
            mock.patch("huggingface_hub.hf_api.is_xet_available", return_value=False),
            mock.patch("transformers.utils.hub.ModelCard.load", side_effect=EntryNotFoundError("no card yet")),
        ]


def captured_push(folder: Path, push) -> CapturedCommit:
    captured = CapturedCommit(folder)
    patches = captured.patches()
    for patch in patches:
        patch.start()
    try:
        push()
    finally:
        for patch in patches:
            patch.stop()
    return captured


@pytest.fixture(scope="module")
def shared_folders(tmp_path_factory, backbone, data_dir) -> dict[str, Path]:
    """Every writer's folder, written from the tiny backbone."""
    root = tmp_path_factory.mktemp("shared")
    steps = ("--max_steps", "2", "--save_steps", "2")
    output = train_gausscse.main(train_args(backbone, data_dir, root / "run", *steps, "--eval_steps", "2"))
    merged = train_gausscse.main(
        train_args(
            backbone, data_dir, root / "merged", *steps, "--eval_strategy", "no", "--lora_r", "4", "--merge_lora"
        )
    )
    unmerged = train_gausscse.main(
        train_args(backbone, data_dir, root / "unmerged", *steps, "--eval_strategy", "no", "--lora_r", "4")
    )
    loaded_save = root / "loaded-save"
    done = python(
        f"import sys\nsys.modules['gausscse'] = None\nfrom transformers import AutoModel\n"
        f"AutoModel.from_pretrained({str(output)!r}, trust_remote_code=True).save_pretrained({str(loaded_save)!r})",
        root,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = AutoModel.from_pretrained(output, trust_remote_code=True)
    captured_push(root / "model-push", lambda: loaded.push_to_hub("me/tiny-gausscse", token="hf_x"))
    pushed_run = root / "train-push-run"
    captured_push(
        root / "train-push",
        lambda: train_gausscse.main(
            [
                *train_args(backbone, data_dir, pushed_run, "--max_steps", "1", "--eval_strategy", "no"),
                "--push_to_hub",
                "--hub_model_id",
                "me/tiny-gausscse",
                "--hub_token",
                "hf_x",
            ]
        ),
    )
    adapter_model = load_model(unmerged)
    captured_push(root / "lora-push", lambda: adapter_model.push_to_hub("me/tiny-gausscse-lora", token="hf_x"))
    adapter_model.as_sentence_transformer().save(str(root / "st-save"))
    return {
        "training_output": output,
        "checkpoint": output / "checkpoint-2",
        "lora_merged": merged,
        "lora_unmerged": unmerged,
        "lora_checkpoint": unmerged / "checkpoint-2",
        "loaded_save_pretrained": loaded_save,
        "model_push_to_hub": root / "model-push",
        "train_push_to_hub": root / "train-push",
        "lora_push_to_hub": root / "lora-push",
        "sentence_transformer_save": root / "st-save",
    }


@pytest.fixture(scope="module")
def matrix(shared_folders, tmp_path_factory) -> dict[tuple[str, str], dict | Exception]:
    """Every (writer, reader) cell: one fresh process per reader loads every writer's folder in turn (a folder's
    first load happens in a process that never wrote or loaded it; the readers run two at a time)."""
    scratch = tmp_path_factory.mktemp("readers")
    readers = ("automodel", "sentence_transformers", "gausscse")

    def cells(reader: str) -> dict[str, dict | Exception]:
        return read_each(reader, {writer: shared_folders[writer] for writer in WRITERS}, scratch / reader)

    with ThreadPoolExecutor(max_workers=2) as pool:
        by_reader = dict(zip(readers, pool.map(cells, readers), strict=True))
    return {(writer, reader): by_reader[reader][writer] for writer in WRITERS for reader in readers}


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_loads_every_writers_folder(matrix, writer, reader):
    result = matrix[(writer, reader if reader in ("automodel", "sentence_transformers") else "gausscse")]
    if isinstance(result, Exception):
        raise result
    reference = matrix[(writer, "automodel")]
    assert not isinstance(reference, Exception)
    if reader == "gausscse_evaluate":
        (model_results,) = result["evaluation"]["models"].values()
        assert "direction" in json.dumps(model_results)
    elif reader == "gausscse_search":
        assert result["indexed"] == len(SENTENCES)
    else:  # the same Gaussians as AutoModel's (the demo reader: the model the demo loaded)
        for key in ("mu", "logvar"):
            torch.testing.assert_close(torch.tensor(result[key]), torch.tensor(reference[key]), rtol=1e-4, atol=1e-5)


def automodel_gaussians(matrix, writer: str) -> torch.Tensor:
    """μ and log σ² of SENTENCES as ``AutoModel`` loaded ``writer``'s folder, stacked ``(2, N, d)``."""
    return torch.tensor([matrix[(writer, "automodel")]["mu"], matrix[(writer, "automodel")]["logvar"]])


def test_shared_folders_hold_the_trained_weights(shared_folders, matrix, backbone):
    """Folders that hold the same model give the same Gaussians: the checkpoint the final model was taken from, the
    re-saved and pushed copies, the sentence-transformers save of the LoRA run; the LoRA run saved unmerged (its base
    model, then the PEFT adapter) equals the same run merged into full weights; and the trained
    models differ from the untrained one they started as (nothing re-initialised)."""
    for copy, original in [
        ("checkpoint", "training_output"),
        ("loaded_save_pretrained", "training_output"),
        ("model_push_to_hub", "training_output"),
        ("lora_checkpoint", "lora_unmerged"),
        ("lora_push_to_hub", "lora_unmerged"),
        ("sentence_transformer_save", "lora_unmerged"),
        ("lora_merged", "lora_unmerged"),  # the same seed, data and steps: only the saving differs
    ]:
        torch.testing.assert_close(
            automodel_gaussians(matrix, copy), automodel_gaussians(matrix, original), rtol=1e-4, atol=1e-5
        )
    torch.manual_seed(7)  # train_args' --seed: the heads the runs started from
    untrained = GaussCSEModel.from_backbone(str(backbone)).eval()
    untrained.get_tokenizer(AutoTokenizer.from_pretrained(backbone))
    before = untrained.encode(SENTENCES)
    for writer in ("training_output", "lora_unmerged"):
        trained = automodel_gaussians(matrix, writer)
        assert (trained[1] - before.logvar).abs().max() > 1e-3, writer


def test_uploads_carry_the_model_files_tokenizer_and_code(shared_folders, tmp_path):
    loaded = load_model(shared_folders["training_output"])
    captured_push(  # save_pretrained(..., push_to_hub=True) uploads the folder once it is whole
        tmp_path / "pushed",
        lambda: loaded.save_pretrained(tmp_path / "saved", push_to_hub=True, repo_id="me/x", token="hf_x"),
    )
    folders = {writer: shared_folders[writer] for writer in ("model_push_to_hub", "train_push_to_hub")}
    for writer, folder in {**folders, "save_pretrained_push": tmp_path / "pushed"}.items():
        files = {path.name for path in folder.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "modules.json"} <= files, writer
        assert {"modeling_gausscse.py", "configuration_gausscse.py", "sentence_transformer_gausscse.py"} <= files
        assert not any(name.startswith("checkpoint") for name in files)
    lora_files = {
        str(path.relative_to(shared_folders["lora_push_to_hub"]))
        for path in shared_folders["lora_push_to_hub"].rglob("*")
        if path.is_file()
    }
    assert {
        "adapter_config.json",
        "adapter_model.safetensors",
        "base_model.json",
        "tokenizer.json",
        "modules.json",
    } <= (lora_files)
    assert "config.json" not in lora_files  # a PEFT adapter repo: readers load its base model, then the adapter


def hub_cache(folder: Path, cache: Path, repo_id: str) -> None:
    """Lay ``folder`` out in ``cache`` as downloading the Hub repo ``repo_id`` leaves it (snapshot + ``refs/main``)."""
    commit = "0" * 39 + "1"
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(folder, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)


@pytest.mark.parametrize("writer", ["model_push_to_hub", "lora_push_to_hub"])
def test_a_pushed_folder_loads_by_its_hub_id(shared_folders, matrix, tmp_path, writer):
    """By Hub id, transformers takes a repo with a top-level adapter_config.json for a bare peft adapter and loads only
    its backbone; the adapter folder keeps peft's files in adapter/, so both readers load the GaussCSE model."""
    hub_cache(shared_folders[writer], tmp_path / "hub", "me/pushed")
    for reader in ("automodel", "sentence_transformers"):
        done = subprocess.run(
            [sys.executable, "-c", reader_code(reader, {"pushed": "me/pushed"})],
            cwd=tmp_path,
            env={**fresh_env(tmp_path), "HF_HUB_CACHE": str(tmp_path / "hub")},
            capture_output=True,
            text=True,
            timeout=300,
        )
        result = last_json(done)["pushed"]
        reference = matrix[(writer, "automodel")]
        torch.testing.assert_close(torch.tensor(result["mu"]), torch.tensor(reference["mu"]), rtol=1e-4, atol=1e-5)


def test_every_written_file_is_readable_by_everyone_as_the_umask_says(shared_folders):
    """safetensors writes 0600; a shared folder must not hide its weights from the group and others (0644)."""
    umask = os.umask(0)
    os.umask(umask)
    for writer in ("training_output", "checkpoint", "lora_unmerged", "lora_checkpoint", "loaded_save_pretrained"):
        folder = shared_folders[writer]
        files = [
            path for path in folder.rglob("*") if path.is_file() and "checkpoint-" not in str(path.relative_to(folder))
        ]
        modes = {str(path.relative_to(folder)): path.stat().st_mode & 0o777 for path in files}
        assert modes == dict.fromkeys(modes, 0o666 & ~umask), writer


def test_a_lora_adapter_folder_is_small_names_its_base_and_keeps_its_card(shared_folders):
    """An unmerged run saves a standard PEFT adapter folder (no config.json, no full weights) on the GaussCSE model it
    started from, saved once in ``base-model``: recorded by its absolute path and the SHA-256 of its files."""
    folder, merged = shared_folders["lora_unmerged"], shared_folders["lora_merged"]
    assert not (folder / "model.safetensors").exists() and not (folder / "config.json").exists()
    assert (folder / "adapter_model.safetensors").stat().st_size < 0.1 * (merged / "model.safetensors").stat().st_size
    adapter_config = json.loads((folder / "adapter_config.json").read_text())
    base = folder / "base-model"
    assert adapter_config["base_model_name_or_path"] == str(base.resolve())
    assert adapter_config["modules_to_save"] and "auto_map" in json.loads((base / "config.json").read_text())
    record = json.loads((folder / "base_model.json").read_text())
    assert set(record["sha256"]) == {"config.json", "model.safetensors"}
    assert "gausscse" in ModelCard.load(folder / "README.md").data.tags  # peft's card did not replace it
    assert not (folder / "checkpoint-2" / "README.md").exists()  # nor wrote one, with a local path, in checkpoints


def test_a_lora_adapter_whose_base_is_gone_fails_with_what_to_do(shared_folders, tmp_path):
    folder = tmp_path / "adapter"
    shutil.copytree(shared_folders["lora_unmerged"], folder, ignore=shutil.ignore_patterns("checkpoint-*", "base-*"))
    set_adapter_base(folder, tmp_path / "moved-base")
    with pytest.raises(ModelLoadError, match=r"LoRA adapter on the base model .*moved-base.* --merge_lora"):
        load_model(folder)


def test_weights_whose_names_do_not_fit_are_refused_not_loaded_at_random(shared_folders, tmp_path):
    """The names an earlier LoRA save wrote (``encoder.base_model.model.*``): transformers alone would start those
    weights at random and only log it; every reader refuses the folder instead."""
    folder = tmp_path / "renamed"
    shutil.copytree(shared_folders["training_output"], folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    state = load_file(folder / "model.safetensors")
    renamed = {re.sub(r"^encoder\.", "encoder.base_model.model.", name): value for name, value in state.items()}
    save_file(renamed, folder / "model.safetensors", metadata={"format": "pt"})
    refusal = r"weights do not fit .*missing keys: encoder\..*unexpected keys.*load it with the gausscse version that"
    with pytest.raises(ModelLoadError, match=refusal):
        load_model(folder)
    done = python(reader_code("automodel", {"renamed": folder}), tmp_path)
    assert done.returncode != 0 and "weights do not fit" in done.stderr


def test_an_adapter_or_heads_that_do_not_fit_are_refused(shared_folders, tmp_path):
    folder = tmp_path / "adapter"
    shutil.copytree(shared_folders["lora_unmerged"], folder, ignore=shutil.ignore_patterns("checkpoint-*"))
    weights = load_file(folder / "adapter_model.safetensors")
    dropped = next(name for name in weights if "lora_B" in name)
    save_file({name: value for name, value in weights.items() if name != dropped}, folder / "adapter_model.safetensors")
    with pytest.raises(ModelLoadError, match=r"its weights do not fit .*missing keys: .*lora_B"):
        load_model(folder)
    head = next(name for name in weights if "logvar_head" in name and name.endswith("bias"))
    save_file({**weights, head: torch.zeros(3)}, folder / "adapter_model.safetensors")
    with pytest.raises(ModelLoadError, match=r"adapter weights do not fit the base model .*base-model \(tensors of"):
        load_model(folder)


def test_load_model_says_what_is_wrong(tmp_path, backbone, shared_folders):
    with pytest.raises(ModelLoadError, match="no such folder, and not a Hub repo id"):
        load_model(tmp_path / "no" / "such" / "model")
    with pytest.raises(ModelLoadError, match=r"is a 'bert' model, not a GaussCSE model: .*from_backbone"):
        load_model(backbone)
    run_without_model = tmp_path / "unfinished"
    shutil.copytree(shared_folders["training_output"] / "checkpoint-2", run_without_model / "checkpoint-2")
    with pytest.raises(ModelLoadError, match=r"no config.json in this folder.*load .*checkpoint-2"):
        load_model(run_without_model)


# ------------------------------------------------------------------------------------- push_to_hub checked up front


def test_the_base_a_push_must_find_on_the_hub(shared_folders, backbone, tmp_path):
    """What ``--push_to_hub`` checks is on the Hub: an adapter's base model, none when the run merges its adapters."""
    from gausscse.cli.train import lora_base as base
    from gausscse.training.arguments import ModelArguments

    adapter, full = shared_folders["lora_unmerged"], shared_folders["training_output"]
    assert base(ModelArguments(model_name_or_path=str(adapter)), tmp_path) == str(adapter / "base-model")
    assert base(ModelArguments(model_name_or_path=str(full), lora_r=4, merge_lora=True), tmp_path) is None
    assert base(ModelArguments(model_name_or_path=str(full), lora_r=4), tmp_path) == str(full)
    assert base(ModelArguments(model_name_or_path=str(backbone), lora_r=4), tmp_path) == str(tmp_path / "base-model")
    assert base(ModelArguments(model_name_or_path=str(backbone)), tmp_path) is None


@pytest.mark.parametrize(
    ("flags", "env", "message"),
    [
        ([], {"HF_HUB_OFFLINE": "1"}, "--push_to_hub needs --hub_model_id"),
        (["--hub_model_id", "me/x"], {"HF_HUB_OFFLINE": "1"}, "offline mode (HF_HUB_OFFLINE=1); unset it or drop the"),
        (["--hub_model_id", "me/x"], {"HF_HUB_OFFLINE": "0", "HF_TOKEN": "", "HF_HOME": "{tmp}"}, "no Hub token"),
        (
            ["--hub_model_id", "me/x", "--hub_token", "hf_x"],
            {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": "http://127.0.0.1:9"},
            "cannot reach the Hub",
        ),
        (["--hub_model_id", "not a repo id"], {"HF_HUB_OFFLINE": "0"}, "not a valid Hub repo id"),
        (
            ["--hub_model_id", "me/x", "--lora_r", "4"],
            {"HF_HUB_OFFLINE": "0"},
            "or start from a GaussCSE model on the Hub",
        ),
        (  # merged: no base to share, so the next check speaks
            ["--hub_model_id", "me/x", "--lora_r", "4", "--merge_lora"],
            {"HF_HUB_OFFLINE": "1"},
            "offline mode (HF_HUB_OFFLINE=1); unset it or drop the",
        ),
    ],
)
def test_push_to_hub_that_cannot_work_stops_before_anything_is_written(
    backbone, data_dir, tmp_path, flags, env, message
):
    output = tmp_path / "run"
    command = ["gausscse-train", *train_args(backbone, data_dir, output, "--max_steps", "1"), "--push_to_hub", *flags]
    environment = fresh_env(tmp_path)
    environment.update({key: value.format(tmp=tmp_path) for key, value in env.items()})
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and message in done.stderr
    assert done.stderr.startswith("gausscse-train: error: --")
    assert not output.exists()


# ---------------------------------------------------------------------------------------- remote code only on request

MARKER_CODE = """from pathlib import Path
Path({marker!r}).write_text("ran")
from transformers import BertConfig, BertModel, BertTokenizerFast


class MarkedConfig(BertConfig):
    pass


class MarkedModel(BertModel):
    config_class = MarkedConfig


class MarkedTokenizer(BertTokenizerFast):
    pass
"""


def backbone_with_code(backbone: Path, folder: Path, marker: Path, model_type: str = "bert") -> Path:
    """A copy of the tiny backbone whose config.json maps AutoConfig/AutoModel to its own code, which writes
    ``marker`` when it runs."""
    shutil.copytree(backbone, folder)
    (folder / "marked.py").write_text(MARKER_CODE.format(marker=str(marker)))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "marked.MarkedConfig", "AutoModel": "marked.MarkedModel"}
    config["model_type"] = model_type
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def tokenizer_with_code(folder: Path, marker: Path) -> Path:
    """``folder`` (a model folder with a tokenizer) with a tokenizer_config.json that maps AutoTokenizer to the
    folder's own code, which writes ``marker`` when it runs."""
    (folder / "marked.py").write_text(MARKER_CODE.format(marker=str(marker)))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config.update(auto_map={"AutoTokenizer": [None, "marked.MarkedTokenizer"]}, tokenizer_class="Marked")
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return folder


@pytest.mark.parametrize("trust", [False, True])
def test_gausscse_train_runs_a_backbones_code_only_with_trust_remote_code(backbone, data_dir, tmp_path, trust):
    marker = tmp_path / "marker.txt"
    folder = backbone_with_code(backbone, tmp_path / "backbone-with-code", marker)
    flags = ("--max_steps", "1", "--eval_strategy", "no", "--save_strategy", "no")
    argv = train_args(folder, data_dir, tmp_path / "run", *flags) + (["--trust_remote_code"] if trust else [])
    train_gausscse.main(argv)
    assert marker.exists() == trust


def test_a_backbone_that_only_its_own_code_can_load_stops_with_the_flag_to_pass(backbone, data_dir, tmp_path):
    marker = tmp_path / "marker.txt"
    folder = backbone_with_code(backbone, tmp_path / "backbone-with-code", marker, model_type="marked-bert")
    argv = train_args(folder, data_dir, tmp_path / "run", "--max_steps", "1", "--eval_strategy", "no")
    with pytest.raises(ValueError, match=r"needs its own Python code .* only with --trust_remote_code"):
        train_gausscse.main(argv)
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_a_read_only_token_cannot_push():
    account = {"name": "me", "orgs": [], "auth": {"accessToken": {"role": "read"}}}
    with (
        mock.patch("huggingface_hub.constants.HF_HUB_OFFLINE", False),
        mock.patch.object(HfApi, "whoami", return_value=account),
        pytest.raises(HubPushError, match="read-only"),
    ):
        check_hub_push("me/x", "hf_read")
    with (
        mock.patch("huggingface_hub.constants.HF_HUB_OFFLINE", False),
        mock.patch.object(HfApi, "whoami", return_value={**account, "auth": {"accessToken": {"role": "write"}}}),
        pytest.raises(HubPushError, match="cannot write to 'someone-else'"),
    ):
        check_hub_push("someone-else/x", "hf_write")


# ------------------------------------------------------------------------------- LoRA: resumed, continued, refused


def lora_state(folder: Path) -> dict[str, torch.Tensor]:
    """The adapter and head weights of an adapter folder."""
    return load_file(folder / "adapter_model.safetensors")


def test_a_lora_run_resumed_from_its_adapter_checkpoint_ends_as_the_uninterrupted_run(backbone, data_dir, tmp_path):
    flags = ("--max_steps", "4", "--save_steps", "2", "--eval_strategy", "no", "--lora_r", "4")
    straight = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "straight", *flags))
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(straight / "checkpoint-2", resumed_dir / "checkpoint-2")
    resumed = train_gausscse.main(
        [*train_args(backbone, data_dir, resumed_dir, *flags), "--resume_from_checkpoint", "true"]
    )
    expected, got, halfway = lora_state(straight), lora_state(resumed), lora_state(straight / "checkpoint-2")
    assert expected.keys() == got.keys()
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], msg=name)
    assert any(not torch.equal(expected[name], halfway[name]) for name in expected)  # steps 3-4 changed them


def test_an_adapter_folder_continues_training_its_adapter(backbone, data_dir, tmp_path):
    flags = ("--max_steps", "2", "--save_strategy", "no", "--eval_strategy", "no")
    first = train_gausscse.main(train_args(backbone, data_dir, tmp_path / "first", *flags, "--lora_r", "4"))
    with pytest.raises(ValueError, match="carries LoRA adapters already: they continue training; drop --lora_r"):
        train_gausscse.main(train_args(first, data_dir, tmp_path / "again", *flags, "--lora_r", "4"))
    second = train_gausscse.main(train_args(first, data_dir, tmp_path / "second", *flags))
    before, after = lora_state(first), lora_state(second)
    for kind in ("lora_", "logvar_head"):
        assert any(kind in name and not torch.equal(before[name], after[name]) for name in before), kind
    bases = [
        json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"] for run in (first, second)
    ]
    assert bases == [str(first / "base-model")] * 2  # the same base: the first run's new model
    weights = load_file(first / "base-model" / "model.safetensors")  # the base changes after the adapter was saved
    changed = next(name for name in weights if name.endswith("query.weight"))
    save_file({**weights, changed: weights[changed] + 0.5}, first / "base-model" / "model.safetensors",
              metadata={"format": "pt"})  # fmt: skip
    with pytest.raises(ValueError, match=r"first: its adapter was trained on the base model .*safetensors differ"):
        train_gausscse.main(train_args(first, data_dir, tmp_path / "third", *flags))
    assert not (tmp_path / "third").exists()


def test_lora_on_a_gausscse_folder_names_that_folder_as_its_base(shared_folders, data_dir, tmp_path):
    start = shared_folders["training_output"]
    argv = train_args(start, data_dir, tmp_path / "run", "--max_steps", "1", "--eval_strategy", "no", "--lora_r", "4")
    run = train_gausscse.main(argv)
    assert json.loads((run / "adapter_config.json").read_text())["base_model_name_or_path"] == str(start.resolve())
    assert not (run / "base-model").exists()
    torch.testing.assert_close(load_model(run).encode(SENTENCES).mu, load_model(start).encode(SENTENCES).mu)


def test_the_sentence_transformers_save_keeps_its_settings(shared_folders, tmp_path):
    st = load_model(shared_folders["training_output"]).as_sentence_transformer()
    st.prompts = {"query": "claim: "}
    st.save(str(tmp_path / "st"))
    saved = json.loads((tmp_path / "st" / "config_sentence_transformers.json").read_text())
    assert saved["prompts"] == {"query": "claim: "} and saved["similarity_fn_name"] == "dot"
    assert saved["requirements"]["sentence-transformers"]["specifier"] == ">=6"
    modules = json.loads((tmp_path / "st" / "modules.json").read_text())
    assert modules[0]["type"] == "sentence_transformer_gausscse.GaussCSETransformer"


# ------------------------------------------------------------------------ adapter folders: one backbone, one layout


def lora_model(backbone: str | Path, base: str | Path, seed: int = 0) -> PeftModel:
    """An eval-mode LoRA model on a new GaussCSE model from ``backbone`` (saved into ``base`` first) whose adapters and
    heads change it (drawn at random, as after training; peft starts lora_B at zero)."""
    torch.manual_seed(seed)
    model = GaussCSEModel.from_backbone(str(backbone))
    model.get_tokenizer(AutoTokenizer.from_pretrained(backbone))
    save_base(model, Path(base))
    model = apply_lora(model, r=4, alpha=8.0, dropout=0.0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name or "modules_to_save" in name:
                parameter.normal_(0, 0.5)
    return model.eval()


def set_adapter_base(folder: Path, base: str | Path) -> None:
    """Point the adapter folder's adapter_config.json base_model_name_or_path at ``base``."""
    config_file = folder / "adapter_config.json"
    config = json.loads(config_file.read_text())
    config["base_model_name_or_path"] = str(base)
    config_file.write_text(json.dumps(config))


def test_an_adapter_records_its_base_absolutely_and_checks_it(backbone, tmp_path, monkeypatch):
    """A base saved by a relative path is recorded by its absolute one, with the SHA-256 of its files: the folder
    loads the same model from a working directory that holds another "base"; a copy of the base loads as the base; a
    base whose weights changed is refused, naming the folder, the recorded base and the file."""
    monkeypatch.chdir(tmp_path)
    model = lora_model(backbone, "base")
    save_adapter_folder(model, Path("adapter-folder"))
    folder, expected = tmp_path / "adapter-folder", model.encode(SENTENCES)
    adapter_config = json.loads((folder / "adapter_config.json").read_text())
    record = json.loads((folder / "base_model.json").read_text())
    absolute = str((tmp_path / "base").resolve())
    assert adapter_config["base_model_name_or_path"] == record["base_model_name_or_path"] == absolute
    assert set(record["sha256"]) == {"config.json", "model.safetensors"}

    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(tmp_path / "base", elsewhere / "base")  # another base of the same relative name, other weights
    weights = load_file(elsewhere / "base" / "model.safetensors")
    changed = next(name for name in weights if name.endswith("query.weight"))
    weights[changed] = weights[changed] + 0.5
    save_file(weights, elsewhere / "base" / "model.safetensors", metadata={"format": "pt"})
    monkeypatch.chdir(elsewhere)
    for reader in (load_model, lambda path: AutoModel.from_pretrained(path, trust_remote_code=True)):
        loaded = reader(folder).encode(SENTENCES)
        torch.testing.assert_close(loaded.mu, expected.mu)
        torch.testing.assert_close(loaded.logvar, expected.logvar)

    shutil.copytree(tmp_path / "base", tmp_path / "copy-of-base")
    set_adapter_base(folder, tmp_path / "copy-of-base")
    torch.testing.assert_close(load_model(folder).encode(SENTENCES).mu, expected.mu)
    set_adapter_base(folder, elsewhere / "base")
    message = (
        rf"{re.escape(str(folder))}: its adapter was trained on the base model {re.escape(absolute)} .*"
        rf"the base loaded, {re.escape(str(elsewhere / 'base'))}, is not that one: its model\.safetensors differ by "
        r"SHA-256\. Point adapter_config\.json's base_model_name_or_path at the base"
    )
    with pytest.raises(ModelLoadError, match=message) as refused:
        load_model(folder)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match=message):
        AutoModel.from_pretrained(folder, trust_remote_code=True)
    for damage in ("{not json", '{"base_model_name_or_path": "x"}', '{"base_model_name_or_path": "x", "sha256": 3}'):
        (folder / "base_model.json").write_text(damage)
        with pytest.raises(ModelLoadError, match=rf"{re.escape(str(folder))}: its base_model.json is damaged") as cut:
            load_model(folder)
        assert "\n" not in str(cut.value)


def test_a_damaged_weights_file_or_config_is_one_line_naming_the_folder(spread_model_folder, tmp_path):
    """A cut ``model.safetensors`` (safetensors' own error names no file) and an ``encoder_config`` that is no object
    are a ``ModelLoadError`` naming the folder, on every tool that loads through ``load_model``."""
    cut = tmp_path / "cut"
    shutil.copytree(spread_model_folder, cut)
    (cut / "model.safetensors").write_bytes((cut / "model.safetensors").read_bytes()[:1000])
    with pytest.raises(ModelLoadError, match=rf"{re.escape(str(cut))}: its weights file \(model.safetensors"):
        load_model(cut)
    odd = tmp_path / "odd"
    shutil.copytree(spread_model_folder, odd)
    config = json.loads((odd / "config.json").read_text())
    (odd / "config.json").write_text(json.dumps({**config, "encoder_config": 5}))
    with pytest.raises(ModelLoadError, match=rf"{re.escape(str(odd))}: .*encoder_config must be an object.*got a int"):
        load_model(odd)


def test_a_full_save_over_an_adapter_folder_leaves_one_layout(backbone, tmp_path):
    """Full weights (sharded), then an adapter folder, then full weights again into one folder: each save leaves only
    its own layout, and the folder loads the model saved last (not the earlier adapter)."""
    folder = tmp_path / "model"
    torch.manual_seed(1)
    full = GaussCSEModel.from_backbone(str(backbone)).eval()
    adapter = lora_model(backbone, tmp_path / "base")

    def files() -> set[str]:
        return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}

    full.save_pretrained(folder, max_shard_size="1MB")
    assert "model.safetensors.index.json" in files()
    save_adapter_folder(adapter, folder)
    assert "config.json" not in files() and not any(name.startswith("model") and "safetensors" in name
                                                    for name in files())  # fmt: skip
    torch.testing.assert_close(load_model(folder).encode(SENTENCES).mu, adapter.encode(SENTENCES).mu)
    loaded_adapter = load_model(folder)
    loaded_adapter.save_pretrained(tmp_path / "resaved")  # a loaded adapter saves as an adapter folder again
    assert not (tmp_path / "resaved" / "config.json").exists()
    torch.testing.assert_close(load_model(tmp_path / "resaved").encode(SENTENCES).mu, adapter.encode(SENTENCES).mu)
    full.save_pretrained(folder)
    assert "model.safetensors" in files() and not {"adapter_config.json", "adapter_model.safetensors"} & files()
    loaded = load_model(folder).encode(SENTENCES)
    torch.testing.assert_close(loaded.mu, full.encode(SENTENCES).mu)
    torch.testing.assert_close(loaded.logvar, full.encode(SENTENCES).logvar)


def test_a_training_save_over_the_other_layout_leaves_only_its_own(backbone, minilm_tokenizer, tmp_path):
    """A run's final save keeps the folder's other entries (checkpoints, logs), but not the other layout of a model
    saved there without the run's manifest: a full model over an adapter folder must not keep the adapter's files
    (transformers would load the adapter on top), and an adapter folder must not keep a config.json and full weights
    (transformers would take them for its base)."""
    card = {"model_name": "m", "base_model": "b", "datasets": [], "metrics": {}, "training_arguments": {},
            "data_stats": {}}  # fmt: skip
    torch.manual_seed(2)
    full, adapter = GaussCSEModel.from_backbone(str(backbone)).eval(), lora_model(backbone, tmp_path / "base")
    for earlier, final, leftovers in ((adapter, full, {"adapter_config.json", "adapter_model.safetensors"}),
                                      (full, adapter, {"model.safetensors", "config.json"})):  # fmt: skip
        folder = tmp_path / f"out-{len(leftovers)}-{type(final).__name__}"
        if earlier is adapter:
            save_adapter_folder(adapter, folder)
        else:
            earlier.save_pretrained(folder)
        (folder / "notes.txt").write_text("the user's own file")
        final_save(final, minilm_tokenizer, folder, card, {})
        assert not leftovers & set(os.listdir(folder)) and (folder / "notes.txt").is_file()
        loaded = load_model(folder).encode(SENTENCES)
        torch.testing.assert_close(loaded.mu, final.encode(SENTENCES).mu)


def test_an_adapter_folder_whose_base_is_itself_is_refused(backbone, tmp_path):
    """An adapter saved into its own base folder is refused before the base changes; an adapter folder that names
    itself or another adapter folder as its base is a clear error, not an endless recursion of loads."""
    own = tmp_path / "base"
    model = lora_model(backbone, own)
    before = {path.name: path.read_bytes() for path in own.iterdir()}
    with pytest.raises(ValueError, match=r"base is the base model of this adapter: save the adapter to another folder"):
        save_adapter_folder(model, own)
    assert {path.name: path.read_bytes() for path in own.iterdir()} == before

    first, second = tmp_path / "first", tmp_path / "second"
    save_adapter_folder(model, first)
    shutil.copytree(first, second)
    set_adapter_base(first, first)
    with pytest.raises(ModelLoadError, match=r"whose base model .* is this folder itself"):
        load_model(first)
    set_adapter_base(first, second)
    set_adapter_base(second, first)
    with pytest.raises(
        ModelLoadError, match=rf"first is a LoRA adapter on the base model '{re.escape(str(second))}', itself"
    ):
        load_model(first)


def test_an_adapter_folder_without_its_adapter_names_what_is_missing(backbone, tmp_path):
    """An adapter folder copied without its weights or its config: the error names the folder and what it lacks, not
    a Hub URL made of its path."""
    save_adapter_folder(lora_model(backbone, tmp_path / "base"), tmp_path / "adapter-folder")
    for missing, refusal in (
        ("adapter_model.safetensors", r"copied.*adapter_model\.safetensors"),
        ("adapter_config.json", r"copied: no config\.json in this folder, so no model"),
    ):
        folder = tmp_path / "copied"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(tmp_path / "adapter-folder", folder, ignore=shutil.ignore_patterns(missing))
        with pytest.raises(ModelLoadError, match=refusal) as error:
            load_model(folder)
        assert "huggingface.co" not in str(error.value) and "hf.co" not in str(error.value)


def test_an_adapter_folder_of_the_earlier_layout_is_refused_with_the_command_that_converts_it(backbone, tmp_path):
    """The earlier layout (LoRA on the encoder in adapter/, the heads in heads.safetensors, config.json at the top):
    every reader refuses it naming the command; the command writes a standard adapter folder with the same
    Gaussians."""
    from peft import LoraConfig
    from peft import get_peft_model as peft_model_of
    from transformers.dynamic_module_utils import custom_object_save

    torch.manual_seed(3)
    model = GaussCSEModel.from_backbone(str(backbone)).eval()
    model.get_tokenizer(AutoTokenizer.from_pretrained(backbone))
    old = tmp_path / "old"
    model.encoder = peft_model_of(model.encoder, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.5)
    expected = model.encode(SENTENCES)
    model.encoder.save_pretrained(old / "adapter")  # what the earlier save wrote
    heads = {k: v for k, v in model.state_dict().items() if k.startswith(("mean_head.", "logvar_head."))}
    save_file(heads, old / "heads.safetensors", metadata={"format": "pt"})
    custom_object_save(model, old, config=model.config)
    model.config.save_pretrained(old)
    model.save_tokenizer(old)
    with pytest.raises(ModelLoadError, match=r"earlier layout .*python -m gausscse.training.lora .*old NEW_FOLDER"):
        load_model(old)
    done = subprocess.run(
        [sys.executable, "-m", "gausscse.training.lora", str(old), str(tmp_path / "new")],
        capture_output=True, text=True, env=fresh_env(tmp_path), timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    converted = load_model(tmp_path / "new").encode(SENTENCES)
    torch.testing.assert_close(converted.mu, expected.mu, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(converted.logvar, expected.logvar, rtol=1e-5, atol=1e-6)
    # bad input, refused before any work, naming the folder: nothing written, nothing deleted
    standard, whole = tmp_path / "new", tmp_path / "whole"
    model.encoder = model.encoder.get_base_model()
    GaussCSEModel.save_pretrained(model, whole)
    kept = {path.name: path.read_bytes() for path in whole.iterdir() if path.is_file()}
    for old_folder, new_folder, message in [
        (tmp_path / "missing", tmp_path / "out1", r"OLD .*missing: no such folder"),
        (standard, tmp_path / "out2", r"OLD .*new: already a standard PEFT adapter folder: nothing to convert"),
        (whole, tmp_path / "out3", r"OLD .*whole: a whole model, not an adapter folder"),
        (old, whole, r"NEW .*whole exists and is not an empty folder: give a new folder"),
        (old, old / "inside", r"OLD .*old holds the folder of NEW"),
    ]:
        done = subprocess.run([sys.executable, "-m", "gausscse.training.lora", str(old_folder), str(new_folder)],
                              capture_output=True, text=True, env=fresh_env(tmp_path), timeout=300)  # fmt: skip
        assert done.returncode == 2 and re.search(message, done.stderr), done.stderr[-2000:]
        assert "Traceback" not in done.stderr
        assert not (tmp_path / new_folder.name).exists() or new_folder == whole
    assert {path.name: path.read_bytes() for path in whole.iterdir() if path.is_file()} == kept


def test_the_converter_never_runs_an_encoders_code(backbone, tmp_path, monkeypatch):
    """The converter loads the old adapter's encoder with trust_remote_code=False: a base that ships code is refused
    without the "run the custom code?" prompt (answered "y" here), and its code never runs."""
    from gausscse.training.lora import convert_adapter_folder

    marker = tmp_path / "marker.txt"
    folder = backbone_with_code(backbone, tmp_path / "with-code", marker, model_type="marked-bert")
    old = tmp_path / "old"
    (old / "adapter").mkdir(parents=True)
    (old / "adapter/adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(folder)}))
    (old / "heads.safetensors").write_bytes(b"")
    GaussCSEModel.from_backbone(str(backbone)).config.save_pretrained(old)
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "y")
    with pytest.raises(ValueError, match=r"with-code contains custom code|trust_remote_code"):
        convert_adapter_folder(old, tmp_path / "new")
    assert asked == [] and not marker.exists()


def test_loading_never_runs_a_folders_code(backbone, tmp_path, monkeypatch):
    """A folder whose config maps to its own code (auto_map) and whose model type transformers does not know: asked
    without trust_remote_code, transformers prompts in a terminal "Do you wish to run the custom code?" and "y" runs
    it. Here every prompt is answered "y" (so the code would run wherever trust_remote_code=False were not passed):
    load_model, gausscse-search build, gausscse-evaluate's loader, from_backbone, an adapter on it as backbone and a
    GaussCSE folder whose tokenizer ships code never ask, and the code never runs."""
    from gausscse.cli.search import main as search

    marker = tmp_path / "marker.txt"
    folder = backbone_with_code(backbone, tmp_path / "with-code", marker, model_type="marked-bert")
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt="": asked.append(prompt) or "y")

    with pytest.raises(ModelLoadError, match=r"with-code is a 'marked-bert' model, not a GaussCSE model"):
        load_model(folder)
    (tmp_path / "corpus.txt").write_text("\n".join(SENTENCES) + "\n")
    build = ["build", "--model", str(folder), "--corpus", str(tmp_path / "corpus.txt"), "--index", str(tmp_path / "i")]
    with pytest.raises(ValueError, match=r"--model .*is a 'marked-bert' model"):
        search(build)
    with pytest.raises(ValueError, match=r"--model/--baseline .*with-code.*: no loadable model config"):
        load_encoder(str(folder))
    with pytest.raises(ValueError, match=r"with-code contains custom code"):
        GaussCSEModel.from_backbone(str(folder))
    adapter = tmp_path / "adapter-folder"
    save_adapter_folder(lora_model(backbone, tmp_path / "base"), adapter)
    set_adapter_base(adapter, folder)
    with pytest.raises(ModelLoadError, match=r"LoRA adapter on .*with-code, a 'marked-bert' model, not a GaussCSE"):
        load_model(adapter)

    full = tmp_path / "gausscse-tokenizer-with-code"
    GaussCSEModel.from_backbone(str(backbone)).save_pretrained(full)
    model = load_model(tokenizer_with_code(full, marker))  # loads, without the tokenizer its code would make
    with pytest.raises(ValueError, match="No tokenizer found"):
        model.get_tokenizer()
    assert asked == [] and not marker.exists()
