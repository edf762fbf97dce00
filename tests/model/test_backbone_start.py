"""The backbone start (a sentence-transformers model's own pooling and Normalize kept as μ, identity μ head,
σ² = 1/d), the frozen μ path (``frozen_mean``) and the keep term (``EmbeddingKeepLoss``, ``--keep_weight``), each
checked against an independent formulation."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, BertModel

from gausscse import GaussCSEConfig, GaussCSEModel
from gausscse.data.sources import build_examples, load_source
from gausscse.data.tokenize import tokenize_examples
from gausscse.model.backbone_gausscse import STARTS, sentence_transformers_pooling, start_fields
from gausscse.training.arguments import parse_arguments
from gausscse.training.batch import TripletCollator, split_batch_embeddings
from gausscse.training.losses import EmbeddingKeepLoss, GaussCSELoss
from gausscse.training.trainer import GaussCSETrainer

from ..helpers import ACROSS_PROCESSES, MINILM_PATH, tiny_encoder_config, tiny_inputs, train_args

BACKBONE_FIELDS = {"mean_activation": "none", "head_init": "identity", "frozen_mean": True, "variance_layers": 1}
SENTENCES = [
    "Dogs run.",
    "A man is playing a guitar on a stage in front of a large and very enthusiastic crowd at night.",
    "A woman slices an onion.",
    "Two children are building a tall sandcastle near the water while their parents watch from the shade of "
    "a striped umbrella, and a dog keeps running off with their spade.",
]


# ---------------------------------------------------------------------------------------------------- helpers


def write_st_folder(root: Path, pooling_config: dict, normalize: bool) -> Path:
    """A sentence-transformers folder (modules.json + 1_Pooling/config.json, no weights) as the library writes it."""
    root.mkdir(parents=True)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir()
    config = {
        "word_embedding_dimension": 32,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        **pooling_config,
    }
    (root / "1_Pooling" / "config.json").write_text(json.dumps(config))
    return root


def frozen_tiny_model(seed: int = 0, **config_kwargs) -> GaussCSEModel:
    """A tiny random two-path model (frozen μ path) with heavy dropout, so the trained path differs pass to pass."""
    torch.manual_seed(seed)
    fields = {"frozen_mean": True, "head_init": "identity", "mean_activation": "none", "pooling": "mean"}
    fields.update(config_kwargs)
    encoder_config = tiny_encoder_config(hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5)
    return GaussCSEModel(GaussCSEConfig(encoder_config=encoder_config, **fields))


def mean_path_parameters(model: GaussCSEModel) -> dict[str, torch.Tensor]:
    return {name: p for name, p in model.named_parameters() if name.startswith(("mean_encoder.", "mean_head."))}


def reference_keep(mu: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """(1/M²) Σ_{a,b} (cos(μ_a, μ_b) − cos(e_a, e_b))², one pair at a time, in float64."""
    mu, teacher = mu.double(), teacher.double()
    rows = mu.shape[0]
    total = mu.new_zeros(())
    for a in range(rows):
        for b in range(rows):
            student = F.cosine_similarity(mu[a], mu[b], dim=0)
            target = F.cosine_similarity(teacher[a], teacher[b], dim=0)
            total = total + (student - target) ** 2
    return total / rows**2


# ------------------------------------------------------------------------------- 1. reading the backbone's pooling


def test_sentence_transformers_pooling_reads_the_folders_pooling_and_normalize(tmp_path):
    """modules.json + 1_Pooling/config.json give (mode, whether a Normalize module follows); a plain folder and a
    pooling of several modes concatenated are not a start GaussCSE can copy (None)."""
    mean_normalized = write_st_folder(tmp_path / "mean", {"pooling_mode_mean_tokens": True}, normalize=True)
    cls_plain = write_st_folder(tmp_path / "cls", {"pooling_mode_cls_token": True}, normalize=False)
    two_modes = write_st_folder(
        tmp_path / "two", {"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": True}, normalize=True
    )
    sqrt_len = write_st_folder(tmp_path / "sqrt", {"pooling_mode_mean_sqrt_len_tokens": True}, normalize=True)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"model_type": "bert"}))

    assert sentence_transformers_pooling(str(mean_normalized)) == ("mean", True)
    assert sentence_transformers_pooling(cls_plain) == ("cls", False)
    assert sentence_transformers_pooling(str(plain)) is None
    assert sentence_transformers_pooling(str(two_modes)) is None
    assert sentence_transformers_pooling(str(sqrt_len)) is None
    assert sentence_transformers_pooling(str(MINILM_PATH)) == ("mean", True)  # the real packaged folder


def test_start_fields_for_each_start(tmp_path):
    """ "paper" sets nothing (GaussCSEConfig's defaults); "auto" is "paper" on a plain encoder and "backbone" on a
    sentence-transformers folder; "backbone" copies the folder's pooling/Normalize and sets the identity heads and the
    frozen μ path (mean pooling, no normalisation on a plain encoder); a bad start names the choices."""
    mean_normalized = write_st_folder(tmp_path / "mean", {"pooling_mode_mean_tokens": True}, normalize=True)
    cls_plain = write_st_folder(tmp_path / "cls", {"pooling_mode_cls_token": True}, normalize=False)
    plain = tmp_path / "plain"
    plain.mkdir()

    assert start_fields(str(mean_normalized), "paper") == {}
    assert start_fields(str(plain), "auto") == {}
    assert start_fields(str(plain), "paper") == {}
    for start in ("backbone", "auto"):
        assert start_fields(str(mean_normalized), start) == {
            "pooling": "mean",
            "normalize_mean": True,
            **BACKBONE_FIELDS,
        }
        assert start_fields(str(cls_plain), start) == {"pooling": "cls", "normalize_mean": False, **BACKBONE_FIELDS}
    assert start_fields(str(plain), "backbone") == {"pooling": "mean", "normalize_mean": False, **BACKBONE_FIELDS}
    with pytest.raises(ValueError, match=re.escape(f"start must be one of {STARTS}, got 'nope'")):
        start_fields(str(mean_normalized), "nope")


def test_a_folder_saved_by_current_sentence_transformers_is_recognised(tmp_path):
    """SentenceTransformer.save of sentence-transformers 6 writes 1_Pooling/config.json with one ``pooling_mode``
    string (and its own module type paths): such a folder must start as itself, Normalize included."""
    root = tmp_path / "st6"
    (root / "1_Pooling").mkdir(parents=True)
    modules = [
        {"idx": 0, "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "path": "1_Pooling", "type": "sentence_transformers.sentence_transformer.modules.pooling.Pooling"},
        {"idx": 2, "path": "2_Normalize", "type": "sentence_transformers.base.modules.normalize.Normalize"},
    ]
    for module in modules:
        module["name"] = str(module["idx"])
    (root / "modules.json").write_text(json.dumps(modules))
    pooling = {"embedding_dimension": 384, "pooling_mode": "cls", "include_prompt": True}
    (root / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    assert sentence_transformers_pooling(str(root)) == ("cls", True)


def test_a_max_pooling_backbone_cannot_start_as_itself(tmp_path):
    """GaussCSE pools cls or mean: a max-pooling sentence-transformers model asked to start as itself is an error
    that names the pooling."""
    max_folder = write_st_folder(tmp_path / "max", {"pooling_mode_max_tokens": True}, normalize=False)
    assert sentence_transformers_pooling(str(max_folder)) == ("max", False)
    with pytest.raises(ValueError, match="'max'"):
        start_fields(str(max_folder), "backbone")
    assert start_fields(str(max_folder), "paper") == {}


# ------------------------------------------------------------------------------- 2. the real MiniLM backbone start


@pytest.fixture(scope="module")
def minilm_backbone_start() -> GaussCSEModel:
    return GaussCSEModel.from_backbone(MINILM_PATH).eval()  # start="auto": a sentence-transformers folder


def test_backbone_start_mu_is_the_sentence_transformers_embedding(minilm_backbone_start):
    """Untrained, μ of the backbone start is exactly what sentence-transformers encodes for MiniLM (mean pooling +
    Normalize), σ² = 1/d everywhere, and the mean_kl similarity is 1/(2 − cos): a function of the backbone's
    cosine alone."""
    from sentence_transformers import SentenceTransformer

    model = minilm_backbone_start
    assert model.config.pooling == "mean" and model.config.normalize_mean and model.config.frozen_mean
    assert (model.config.mean_activation, model.config.head_init) == ("none", "identity")
    assert model.config.similarity_reduction == "mean_kl"
    # one trunk (results/ONEPASS.md): the encoder is the frozen μ path, log σ² from a copy of its top layer
    assert model.config.variance_layers == 1 and model.mean_encoder is None
    assert not any(parameter.requires_grad for parameter in model.encoder.parameters())
    torch.testing.assert_close(
        model.variance_layers[0].attention.self.query.weight,
        model.encoder.encoder.layer[5].attention.self.query.weight,
        rtol=0,
        atol=0,
    )

    reference = SentenceTransformer(str(MINILM_PATH), device="cpu").encode(SENTENCES, convert_to_tensor=True).cpu()
    embeddings = model.encode(SENTENCES)
    torch.testing.assert_close(embeddings.mu, reference, rtol=0, atol=1e-6)
    dim = reference.shape[1]
    assert dim == 384
    torch.testing.assert_close(embeddings.logvar, torch.full_like(reference, -math.log(dim)), rtol=0, atol=1e-6)

    cosine = F.cosine_similarity(reference[:, None, :], reference[None, :, :], dim=-1)
    expected = 1.0 / (2.0 - cosine)
    torch.testing.assert_close(model.similarity(SENTENCES, SENTENCES), expected, rtol=1e-5, atol=0)
    assert expected.min() < 0.7  # different sentences: a real spread of scores, not all ≈ 1


def test_a_trained_mu_or_an_explicit_setting_overrides_the_backbone_starts_trunk():
    """--frozen_mean false (one encoder trained for μ and σ²) drops the start's variance_layers; --variance_layers 0
    keeps the two full paths."""
    shared = GaussCSEModel.from_backbone(MINILM_PATH, frozen_mean=False)
    assert shared.config.variance_layers == 0 and shared.variance_layers is None and shared.mean_encoder is None
    two_paths = GaussCSEModel.from_backbone(MINILM_PATH, variance_layers=0)
    assert two_paths.config.frozen_mean and two_paths.mean_encoder is not None and two_paths.variance_layers is None


def test_paper_start_on_minilm_is_the_papers_setup():
    """start="paper" ignores the sentence-transformers files: [CLS], tanh, random heads, one trained path."""
    model = GaussCSEModel.from_backbone(MINILM_PATH, start="paper")
    config = model.config
    assert (config.pooling, config.mean_activation, config.head_init, config.frozen_mean) == (
        "cls",
        "tanh",
        "random",
        False,
    )
    assert not config.normalize_mean and model.mean_encoder is None
    assert not torch.equal(model.mean_head.weight, torch.eye(384))


# ------------------------------------------------------------------------------------------ 3. config validation


def test_config_rejects_an_identity_head_of_another_width_and_unknown_head_inits():
    """The identity μ head needs embedding_size = hidden size; head_init takes only its choices."""
    encoder_config = tiny_encoder_config()  # hidden size 32
    GaussCSEConfig(encoder_config=encoder_config, head_init="identity", embedding_size=32)
    GaussCSEConfig(encoder_config=encoder_config, head_init="random", embedding_size=16)
    with pytest.raises(ValueError, match=r"head_init='identity' needs embedding_size equal.*\(32\), got 16"):
        GaussCSEConfig(encoder_config=encoder_config, head_init="identity", embedding_size=16)
    with pytest.raises(ValueError, match=r"head_init must be one of \('random', 'identity'\), got 'zeros'"):
        GaussCSEConfig(encoder_config=encoder_config, head_init="zeros")


# ------------------------------------------------------------------------------------------- 4. the frozen μ path


def test_a_frozen_mean_model_built_around_an_encoder_copies_it():
    """GaussCSEModel(config, encoder=e) with frozen_mean: the μ path starts as a copy of e (same weights, its own
    storage), so μ comes from the encoder the model started from, not from a random one."""
    config = GaussCSEConfig(encoder_config=tiny_encoder_config(), frozen_mean=True)
    encoder = BertModel(config.encoder_config, add_pooling_layer=False)
    model = GaussCSEModel(config, encoder=encoder)
    assert model.encoder is encoder and model.mean_encoder is not encoder
    for (name, frozen), (_, trained) in zip(
        model.mean_encoder.state_dict().items(), encoder.state_dict().items(), strict=True
    ):
        assert torch.equal(frozen, trained), name
        assert frozen.data_ptr() != trained.data_ptr(), name


def test_frozen_mean_path_takes_no_gradient_and_stays_in_eval_mode():
    """With frozen_mean the μ path (mean_encoder, mean_head) has requires_grad False and model.train() leaves it in
    eval mode while the trained encoder trains; a mean_encoder without frozen_mean is an error."""
    model = frozen_tiny_model()
    assert model.mean_encoder is not None and model.mean_encoder is not model.encoder
    frozen = mean_path_parameters(model)
    assert frozen and not any(p.requires_grad for p in frozen.values())
    trained = [p for name, p in model.named_parameters() if name not in frozen]
    assert trained and all(p.requires_grad for p in trained)
    model.train()
    assert model.training and model.encoder.training and model.logvar_head.training
    assert not model.mean_encoder.training
    assert not any(module.training for module in model.mean_encoder.modules())
    model.eval()
    model.train(True)
    assert not model.mean_encoder.training and model.encoder.training

    config = GaussCSEConfig(encoder_config=tiny_encoder_config())
    with pytest.raises(ValueError, match="mean_encoder is only used with frozen_mean=True"):
        GaussCSEModel(config, mean_encoder=BertModel(config.encoder_config, add_pooling_layer=False))


def test_frozen_mean_mu_is_deterministic_in_train_mode_and_is_the_frozen_encoders_pooled_vector():
    """In train mode (dropout 0.5) two passes give bit-identical μ, while the trained path's pooled vector differs;
    μ equals the masked token mean of mean_encoder in eval mode computed by hand (identity head, no activation)."""
    model = frozen_tiny_model().train()
    inputs = tiny_inputs()
    first, second = model(**inputs), model(**inputs)
    assert torch.equal(first.mu, second.mu)
    assert not torch.equal(first.pooled_output, second.pooled_output)  # dropout is on in the σ path

    with torch.no_grad():
        hidden = model.mean_encoder(**inputs).last_hidden_state
        mask = inputs["attention_mask"].unsqueeze(-1).float()
        by_hand = (hidden * mask).sum(1) / mask.sum(1)
    torch.testing.assert_close(first.mu, by_hand, rtol=0, atol=1e-6)
    assert first.mu.grad_fn is None and first.logvar.grad_fn is not None
    model.mean_head.requires_grad_(True)  # even then: the whole frozen μ path, head included, runs under no_grad
    assert model(**inputs).mu.grad_fn is None


def test_an_optimizer_step_moves_the_trained_path_only():
    """One AdamW step (weight decay on, every parameter handed to it) on mu.sum() + logvar.sum() changes the encoder
    and the log-variance head but leaves mean_encoder and mean_head bit-identical (random heads, so the encoder gets a
    real gradient through W_σ)."""
    model = frozen_tiny_model(head_init="random").train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    output = model(**tiny_inputs())
    (output.mu.sum() + output.logvar.sum()).backward()
    frozen = mean_path_parameters(model)
    assert all(p.grad is None for p in frozen.values())
    encoder_grad = model.encoder.encoder.layer[0].attention.self.query.weight.grad
    assert encoder_grad is not None and encoder_grad.abs().sum() > 0
    optimizer.step()
    after = dict(model.named_parameters())
    for name in frozen:
        assert torch.equal(after[name], before[name]), name
    for name in ("encoder.encoder.layer[0].attention.self.query.weight", "logvar_head.weight", "logvar_head.bias"):
        key = name.replace("[0]", ".0")
        assert not torch.equal(after[key], before[key]), name


def test_frozen_mean_survives_save_and_load_here_and_in_a_fresh_process(tmp_path, fresh_python):
    """save_pretrained → from_pretrained keeps frozen_mean, μ and log σ² and the frozen μ path (requires_grad False,
    eval mode under train()); AutoModel with trust_remote_code in a new interpreter (project not importable) too."""
    model = frozen_tiny_model()
    with torch.no_grad():  # a log-variance head that depends on the sentence, so log σ² is a real check
        model.logvar_head.weight.normal_(0.0, 0.1)
    model.eval()
    inputs = tiny_inputs()
    expected = model(**inputs)
    folder = tmp_path / "saved"
    model.save_pretrained(folder)

    loaded = GaussCSEModel.from_pretrained(folder).eval()
    assert loaded.config.frozen_mean and loaded.mean_encoder is not None
    assert not any(p.requires_grad for p in mean_path_parameters(loaded).values())
    assert loaded.train().mean_encoder.training is False
    loaded.eval()
    output = loaded(**inputs)
    torch.testing.assert_close(output.mu, expected.mu, rtol=0, atol=0)
    torch.testing.assert_close(output.logvar, expected.logvar, rtol=0, atol=0)

    torch.save(inputs, tmp_path / "inputs.pt")
    printed = fresh_python(
        f"""
import torch
from transformers import AutoModel
model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True).eval()
inputs = torch.load({str(tmp_path / "inputs.pt")!r})
with torch.no_grad():
    output = model(**inputs)
torch.save({{"mu": output.mu, "logvar": output.logvar}}, {str(tmp_path / "outputs.pt")!r})
frozen = [p for n, p in model.named_parameters() if n.startswith(("mean_encoder.", "mean_head."))]
model.train()
print(model.config.frozen_mean, len(frozen) > 0, any(p.requires_grad for p in frozen), model.mean_encoder.training)
""",
        cwd=tmp_path,
    )
    assert printed.split() == ["True", "True", "False", "False"]
    reloaded = torch.load(tmp_path / "outputs.pt")
    torch.testing.assert_close(reloaded["mu"], expected.mu, **ACROSS_PROCESSES)
    torch.testing.assert_close(reloaded["logvar"], expected.logvar, **ACROSS_PROCESSES)


# ------------------------------------------------------------------------------------------------ 5. the keep loss


def test_keep_loss_is_the_mean_squared_gap_of_in_batch_cosines():
    """EmbeddingKeepLoss = (1/M²) Σ_{a,b} (cos(μ_a, μ_b) − cos(e_a, e_b))² (loop reference, widths 8 vs 12), its
    gradient on μ matches the reference's, the teacher gets none; 0 when the teacher is μ; rows must match."""
    torch.manual_seed(0)
    mu = torch.randn(5, 8, requires_grad=True)
    teacher = torch.randn(5, 12, requires_grad=True)
    keep = EmbeddingKeepLoss()
    loss = keep(mu, teacher)
    reference = reference_keep(mu, teacher.detach())
    assert loss.dtype == torch.float32 and loss.ndim == 0
    torch.testing.assert_close(loss.double(), reference, rtol=1e-5, atol=0)
    assert reference > 1e-2

    loss.backward()
    (reference_grad,) = torch.autograd.grad(reference_keep(mu, teacher.detach()), mu)
    assert teacher.grad is None
    torch.testing.assert_close(mu.grad, reference_grad, rtol=1e-4, atol=1e-7)
    assert mu.grad.abs().sum() > 0

    assert float(keep(mu.detach(), mu.detach().clone())) == pytest.approx(0.0, abs=1e-7)
    assert float(keep(mu.detach(), 3.0 * mu.detach())) == pytest.approx(0.0, abs=1e-7)  # cosines ignore the scale
    with pytest.raises(ValueError, match="one row per sentence, got 5 and 4"):
        keep(mu, teacher[:4])


# ------------------------------------------------------------------------------------ 6. the keep term in training


def trainer_arguments(backbone: Path, data_dir: Path, output: Path, *extra: str):
    """The training arguments of test_training's runs, without evaluation."""
    return parse_arguments(train_args(backbone, data_dir, output, "--eval_strategy", "no", *extra))[2]


def test_trainer_loss_is_the_gausscse_loss_plus_the_weighted_keep_term(backbone, data_dir, tmp_path):
    """With --keep_weight 0.5 the trainer holds a frozen snapshot of the starting encoder (a copy, not the live
    one) and compute_loss = GaussCSE loss + 0.5 · keep(μ, [CLS] of the starting backbone), the pieces computed here
    from the batch, the backbone reloaded from disk and the reference keep loss; padded and packed batches agree."""
    training_args = trainer_arguments(backbone, data_dir, tmp_path / "out", "--keep_weight", "0.5")
    assert training_args.keep_weight == 0.5
    torch.manual_seed(0)
    model = GaussCSEModel.from_backbone(str(backbone))  # plain encoder: start "paper" ([CLS], tanh, random heads)
    trainer = GaussCSETrainer(model=model, args=training_args, train_dataset=[{}])
    teacher = trainer.keep_teacher
    assert teacher is not None and teacher is not model.encoder and not teacher.training
    assert not any(p.requires_grad for p in teacher.parameters())
    live = dict(model.encoder.named_parameters())
    for name, parameter in teacher.named_parameters():
        assert torch.equal(parameter, live[name]) and parameter.data_ptr() != live[name].data_ptr(), name
    with torch.no_grad():  # training moves the live encoder away from the snapshot
        for parameter in model.encoder.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    model.eval()

    tokenizer = AutoTokenizer.from_pretrained(backbone)
    dataset, _ = build_examples([load_source("snli", data_dir)])
    examples = list(tokenize_examples(dataset.select(range(4)), tokenizer, 32))
    padded = TripletCollator.for_tokenizer(tokenizer)(examples)
    loss = trainer.compute_loss(model, padded)

    with torch.no_grad():
        features = {k: v for k, v in padded.items() if k not in ("contradiction_index", "text_ids")}
        output = model(**features)
        batch = split_batch_embeddings(output.mu, output.logvar, padded["contradiction_index"], padded["text_ids"])
        plain = GaussCSELoss("ent+con+rev", 0.05, model.config.similarity_reduction)(batch)
        start = BertModel.from_pretrained(backbone, add_pooling_layer=False).eval()
        cls_vectors = start(**features).last_hidden_state[:, 0]
        keep = reference_keep(output.mu, cls_vectors)
    assert keep > 1e-3
    torch.testing.assert_close(loss.double(), plain.double() + 0.5 * keep, rtol=1e-5, atol=0)

    packed = TripletCollator.for_tokenizer(tokenizer, model.config.encoder_config, pack=True, pack_length=64)(examples)
    assert packed["input_ids"].shape[0] < padded["input_ids"].shape[0]
    torch.testing.assert_close(trainer.compute_loss(model, packed), loss, rtol=1e-5, atol=1e-6)

    no_keep = GaussCSETrainer(
        model=model, args=trainer_arguments(backbone, data_dir, tmp_path / "b"), train_dataset=[{}]
    )
    assert no_keep.keep_teacher is None
    torch.testing.assert_close(no_keep.compute_loss(model, padded), plain, rtol=1e-5, atol=0)


def test_keep_weight_with_a_frozen_mean_model_and_bad_flags_are_errors(backbone, data_dir, tmp_path):
    """--keep_weight with a frozen-μ model is refused (nothing to keep); a negative --keep_weight and an unknown
    --start are refused by the argument parser, naming the flag."""
    training_args = trainer_arguments(backbone, data_dir, tmp_path / "out", "--keep_weight", "0.5")
    with pytest.raises(ValueError, match="--keep_weight with a frozen_mean model"):
        GaussCSETrainer(model=frozen_tiny_model(), args=training_args, train_dataset=[{}])
    with pytest.raises(ValueError, match=r"--keep_weight must be a finite number >= 0, got -1"):
        parse_arguments(["--output_dir", str(tmp_path), "--keep_weight", "-1"])
    with pytest.raises(ValueError, match=r"--start must be one of \('auto', 'paper', 'backbone'\), got 'nope'"):
        parse_arguments(["--output_dir", str(tmp_path), "--start", "nope"])


def test_the_retrieval_term_defaults_on_for_the_frozen_mean_path_only(backbone, data_dir, tmp_path):
    """Without --retrieval_weight the trainer's loss has the retrieval term at weight 1 for a frozen-μ model (the keep
    study's default) and 0 for a paper-start model; a given weight is used as is, a negative one refused."""
    plain = trainer_arguments(backbone, data_dir, tmp_path / "a")
    assert plain.retrieval_weight is None
    assert GaussCSETrainer(model=frozen_tiny_model(), args=plain, train_dataset=[{}]).loss_fn.retrieval_weight == 1.0
    paper = GaussCSEModel.from_backbone(str(backbone))
    assert GaussCSETrainer(model=paper, args=plain, train_dataset=[{}]).loss_fn.retrieval_weight == 0.0
    given = trainer_arguments(backbone, data_dir, tmp_path / "b", "--retrieval_weight", "0.25")
    assert GaussCSETrainer(model=frozen_tiny_model(), args=given, train_dataset=[{}]).loss_fn.retrieval_weight == 0.25
    with pytest.raises(ValueError, match=r"--retrieval_weight must be a finite number >= 0, got -1"):
        parse_arguments(["--output_dir", str(tmp_path), "--retrieval_weight", "-1"])


def test_lora_on_a_frozen_mean_model_trains_adapters_and_the_variance_head_only():
    """apply_lora puts adapters in the trained encoder only; the frozen μ path (mean_encoder and mean_head) stays
    without gradient, and μ after one optimizer step on the LoRA model equals μ before."""
    from gausscse.training.lora import apply_lora

    model = apply_lora(frozen_tiny_model(), r=2, alpha=4.0, dropout=0.0, target_modules=["query", "value"])
    trainable = {name for name, parameter in model.named_parameters() if parameter.requires_grad}
    assert trainable and all(
        ("lora_" in name and ".mean_encoder." not in name) or ".logvar_head.modules_to_save." in name
        for name in trainable
    ), trainable
    assert any(".encoder." in name and "lora_" in name for name in trainable)
    before = model.eval()(**tiny_inputs()).mu.detach().clone()
    model.train()
    output = model(**tiny_inputs())
    torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1).zero_grad()
    (output.logvar.sum()).backward()
    torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.1).step()
    torch.testing.assert_close(model.eval()(**tiny_inputs()).mu, before, rtol=0, atol=0)
