"""--pack_sequences: several sentences per row of the one forward pass give the same Gaussians and the same loss."""

import datasets
import pytest
import torch

from gausscse.data.tokenize import tokenize_examples
from gausscse.model.configuration_gausscse import POOLINGS
from gausscse.model.encoding_gausscse import ENCODER_POSITIONS, position_offset, resolve_max_length
from gausscse.training.batch import TripletCollator, pack_sentences, packing_position_offset, split_batch_embeddings
from gausscse.training.losses import GaussCSELoss

EXAMPLES = [
    {"premise": "A man is playing a guitar on a stage in front of a crowd.", "entailment": "A man plays music.",
     "contradiction": "Nobody is playing anything."},
    {"premise": "Two dogs run through a snowy field.", "entailment": "Animals are outside.", "contradiction": None},
    {"premise": "A woman slices an onion.", "entailment": "A woman is cooking.",
     "contradiction": "A woman is sleeping in her bed at home."},
    {"premise": "Kids play soccer.", "entailment": "Children are playing a sport outdoors today.",
     "contradiction": None},
]  # fmt: skip


def padded_and_packed(model, tokenizer) -> tuple[dict, dict]:
    tokenized = list(tokenize_examples(datasets.Dataset.from_list(EXAMPLES), tokenizer, 24))
    padded = TripletCollator.for_tokenizer(tokenizer)(tokenized)
    packed = TripletCollator.for_tokenizer(tokenizer, model.config.encoder_config, pack=True, pack_length=40)(tokenized)
    return padded, packed


def test_packing_takes_its_position_offset_from_the_encoders_config(minilm_tokenizer, make_tiny_model):
    roberta = make_tiny_model("roberta").config.encoder_config
    collator = TripletCollator.for_tokenizer(minilm_tokenizer, roberta, pack=True)
    assert collator.position_offset == roberta.pad_token_id + 1 == 2  # RoBERTa's positions start after padding_idx
    assert TripletCollator.for_tokenizer(minilm_tokenizer, make_tiny_model("bert").config.encoder_config, pack=True
                                         ).position_offset == 0  # fmt: skip
    with pytest.raises(ValueError, match="packing needs the encoder's first position id"):
        TripletCollator.for_tokenizer(minilm_tokenizer, pack=True)


@pytest.mark.parametrize("model_type", sorted(ENCODER_POSITIONS))
@pytest.mark.parametrize("pooling", POOLINGS)
def test_packed_forward_equals_padded_forward(model_type, pooling, make_tiny_model, minilm_tokenizer):
    """Every encoder of the one table packs, with every pooling a model can have."""
    model = make_tiny_model(model_type, pooling=pooling)
    padded, packed = padded_and_packed(model, minilm_tokenizer)
    assert packed["input_ids"].shape[0] < padded["input_ids"].shape[0]  # fewer rows, fewer padding tokens
    assert packed["input_ids"].numel() < padded["input_ids"].numel()
    with torch.no_grad():
        expected = model(**{k: v for k, v in padded.items() if k not in ("contradiction_index", "text_ids")})
        actual = model(**{k: v for k, v in packed.items() if k not in ("contradiction_index", "text_ids")})
    torch.testing.assert_close(actual.mu, expected.mu, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(actual.logvar, expected.logvar, atol=1e-5, rtol=1e-4)


def test_packed_loss_and_gradients_equal_padded(make_tiny_model, minilm_tokenizer):
    model = make_tiny_model()  # eval mode: no dropout, so both passes see the same network
    loss_fn = GaussCSELoss("ent+con+rev", 0.05, "sum", gather=False)
    losses, gradients = [], []
    for features in padded_and_packed(model, minilm_tokenizer):
        features = dict(features)
        contradiction_index, text_ids = features.pop("contradiction_index"), features.pop("text_ids")
        output = model(**features)
        loss = loss_fn(split_batch_embeddings(output.mu, output.logvar, contradiction_index, text_ids))
        model.zero_grad()
        loss.backward()
        losses.append(loss.detach())
        gradients.append(model.encoder.encoder.layer[0].attention.self.query.weight.grad.clone())
    torch.testing.assert_close(losses[0], losses[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gradients[0], gradients[1], atol=1e-5, rtol=1e-3)


def test_pack_sentences_layout_and_errors():
    packed = pack_sentences([[101, 7, 102], [101, 8, 9, 10, 102], [101, 102]], row_length=6, position_offset=2)
    assert packed["input_ids"].tolist() == [[101, 8, 9, 10, 102, 0], [101, 7, 102, 101, 102, 0]]
    assert packed["sentence_index"].tolist() == [[1, 1, 1, 1, 1, -1], [0, 0, 0, 2, 2, -1]]
    assert packed["position_ids"].tolist() == [[2, 3, 4, 5, 6, 0], [2, 3, 4, 2, 3, 0]]
    mask = packed["attention_mask"][1, 0]
    assert mask[0, :3].all() and not mask[0, 3:].any()  # sentence 0 sees only itself
    assert mask[5].tolist() == [False] * 5 + [True]  # a padding token sees only itself
    with pytest.raises(ValueError, match=r"pack_length=4 is shorter than sentence 1 \(5 tokens\)"):
        pack_sentences([[1, 2], [1, 2, 3, 4, 5]], row_length=4, position_offset=0)


@pytest.mark.parametrize("model_type", sorted(ENCODER_POSITIONS))
def test_the_encoder_table_states_where_each_encoders_own_positions_start(model_type, make_tiny_model):
    """The offset the table gives (used by packing and by the truncation limit) is the one the encoder uses itself:
    its forward with the default position ids equals the forward with ``offset + 0, 1, ...`` given."""
    encoder = make_tiny_model(model_type).encoder
    input_ids = torch.tensor([[101, 7592, 2088, 2003, 102]])
    offset = position_offset(encoder.config)
    given = torch.arange(input_ids.shape[1])[None] + offset
    with torch.no_grad():
        own = encoder(input_ids=input_ids).last_hidden_state
        explicit = encoder(input_ids=input_ids, position_ids=given).last_hidden_state
        shifted = encoder(input_ids=input_ids, position_ids=given + 1).last_hidden_state
    torch.testing.assert_close(explicit, own)
    assert not torch.allclose(shifted, own)  # the check can fail: positions matter


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta", "camembert"])
def test_the_roberta_family_packs_and_counts_positions_after_padding(model_type, make_tiny_model):
    """RoBERTa's padding-offset positions, and the encoders built on its embeddings: one table says so for packing
    and for the truncation limit (CamemBERT was in the limit's list and not in packing's)."""
    config = make_tiny_model(model_type).config.encoder_config
    assert packing_position_offset(config) == position_offset(config) == config.pad_token_id + 1 == 2
    assert resolve_max_length(None, config) == config.max_position_embeddings - 2


def test_packing_rejects_encoders_without_absolute_positions(make_tiny_model):
    model = make_tiny_model()
    model.config.encoder_config.model_type = "deberta-v2"
    with pytest.raises(
        ValueError, match=r"--pack_sequences supports encoders with absolute position ids .*drop the flag"
    ):
        packing_position_offset(model.config.encoder_config)


def test_packing_unset_packs_on_the_cpu_only_and_the_recipes_leave_it_to_the_device(
    backbone, data_dir, tmp_path, make_tiny_model
):
    """--pack_sequences unset: packed rows on the CPU, padded rows on a GPU (where packing is slower), never for an
    encoder that cannot pack; the quickstart and release recipes do not fix it; the collator gausscse-train builds
    here (CPU) from the quickstart recipe packs, and --pack_sequences false still turns it off."""
    import yaml

    from gausscse.cli.train import build_trainer, run_arguments
    from gausscse.training.arguments import parse_arguments
    from gausscse.training.batch import packs_by_default

    from ..helpers import REPO_ROOT, train_args

    bert = make_tiny_model("bert").config.encoder_config
    assert packs_by_default(torch.device("cpu"), bert) and not packs_by_default(torch.device("cuda", 0), bert)
    assert not packs_by_default(torch.device("cpu"), type("Config", (), {"model_type": "deberta-v2"})())
    for recipe in ("quickstart", "release"):
        assert "pack_sequences" not in yaml.safe_load((REPO_ROOT / "configs" / f"{recipe}.yaml").read_text())
    for extra, packs in (((), True), (("--pack_sequences", "false"), False)):
        arguments = parse_arguments(train_args(backbone, data_dir, tmp_path / "run", "--eval_strategy", "no", *extra))
        assert arguments[1].pack_sequences is (None if not extra else False)
        trainer, _ = build_trainer(*arguments, run_arguments(*arguments))
        assert trainer.data_collator.pack is packs
