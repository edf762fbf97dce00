"""What a training run through the Trainer does to the weights: a frozen backbone stays bit-identical, the SimCSE loss
never touches the σ² head, and with load_best_model_at_end the final folder holds the best checkpoint's weights."""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path
from unittest import mock

import pytest
import torch
from safetensors.torch import load_file

from gausscse.cli import train as train_gausscse
from gausscse.evaluation.dev_evaluator import SNLIDevEvaluator

from .test_training import train_args

HEADS = ("mean_head.", "logvar_head.")


def run_and_capture_the_initial_weights(argv: list[str]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Train with ``argv``; return (the model's weights as ``build_model`` made them, the saved final weights)."""
    initial: dict[str, torch.Tensor] = {}
    build_model = train_gausscse.build_model

    def build_and_copy(model_args, *args):
        model = build_model(model_args, *args)
        initial.update({name: value.detach().clone() for name, value in model.state_dict().items()})
        return model

    with mock.patch.object(train_gausscse, "build_model", side_effect=build_and_copy):
        model_dir = train_gausscse.main(argv)
    return initial, load_file(model_dir / "model.safetensors")


def changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor], prefixes: tuple[str, ...]) -> list[str]:
    """Names under ``prefixes`` whose tensors differ bit-wise between ``before`` and ``after``."""
    assert any(name.startswith(prefixes) for name in before), prefixes
    return [name for name in before if name.startswith(prefixes) and not torch.equal(before[name], after[name])]


SHORT_RUN = ("--max_steps", "3", "--eval_strategy", "no", "--save_strategy", "no")


def test_freeze_backbone_trains_the_heads_only(backbone, data_dir, tmp_path):
    argv = train_args(backbone, data_dir, tmp_path / "frozen", *SHORT_RUN, "--freeze_backbone")
    initial, final = run_and_capture_the_initial_weights(argv)
    assert initial.keys() == final.keys()
    assert changed(initial, final, ("encoder.",)) == []
    # the backbone as it was saved, too (the state dict names it under "encoder.")
    saved_backbone = load_file(backbone / "model.safetensors")
    assert {f"encoder.{name}" for name in saved_backbone} == {name for name in final if name.startswith("encoder.")}
    assert all(torch.equal(final[f"encoder.{name}"], value) for name, value in saved_backbone.items())
    assert sorted(changed(initial, final, HEADS)) == [
        "logvar_head.bias",
        "logvar_head.weight",
        "mean_head.bias",
        "mean_head.weight",
    ]


def test_simcse_loss_never_touches_the_variance_head(backbone, data_dir, tmp_path):
    """SimCSE's loss is on μ only: the σ² head gets no gradient, so AdamW (weight decay included) skips it."""
    argv = train_args(backbone, data_dir, tmp_path / "simcse", *SHORT_RUN, "--loss", "simcse")
    initial, final = run_and_capture_the_initial_weights(argv)
    assert changed(initial, final, ("logvar_head.",)) == []
    assert sorted(changed(initial, final, ("mean_head.",))) == ["mean_head.bias", "mean_head.weight"]
    assert changed(initial, final, ("encoder.",))  # the backbone trains


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_the_final_weights_are_the_best_checkpoints(lora, backbone, data_dir, tmp_path):
    """Evaluation every 2 of 6 steps with a dev metric that peaks at the second evaluation: the final folder holds
    checkpoint-4's weights, not the last step's (checkpoint-6), and the records name checkpoint-4; a LoRA run's too
    (Trainer loads the best adapter back itself)."""
    output = tmp_path / "best"
    metrics = {2: 40.0, 4: 60.0, 6: 50.0}  # by training step
    evaluations = count(1)

    def scripted_metric(self, model, tokenizer=None):
        step = min(2 * next(evaluations), 6)  # the evaluations at steps 2, 4, 6, then main()'s final one
        return {"snli_dev_auprc": metrics[step]}

    argv = train_args(backbone, data_dir, output, "--max_steps", "6", "--eval_steps", "2", "--save_steps", "2")
    argv += ["--lora_r", "4"] if lora else []
    weights = "adapter_model.safetensors" if lora else "model.safetensors"
    with mock.patch.object(SNLIDevEvaluator, "__call__", scripted_metric):
        train_gausscse.main(argv)

    state = json.loads((output / "checkpoint-6" / "trainer_state.json").read_text())
    logged = {
        entry["step"]: entry["eval_snli_dev_auprc"] for entry in state["log_history"] if "eval_snli_dev_auprc" in entry
    }
    assert logged == metrics
    best_step = max(logged, key=logged.get)
    assert best_step == 4 and Path(state["best_model_checkpoint"]) == output / "checkpoint-4"
    results = json.loads((output / "train_results.json").read_text())
    assert Path(results["best_model_checkpoint"]) == output / "checkpoint-4"

    final = load_file(output / weights)
    best = load_file(output / "checkpoint-4" / weights)
    last = load_file(output / "checkpoint-6" / weights)
    assert final.keys() == best.keys() == last.keys()
    assert all(torch.equal(final[name], best[name]) for name in final)
    assert not all(torch.equal(final[name], last[name]) for name in final)  # two more steps changed the weights
