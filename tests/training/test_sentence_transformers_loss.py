"""The GaussCSE loss under sentence-transformers' ``SentenceTransformerTrainer``: on the same batch it equals what
``GaussCSETrainer`` computes (repeated hypotheses included: the false-negative masks agree), a few training steps move
the weights and the saved folder loads back, and a model that is not GaussCSE's or a batch of one column is refused."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
from transformers import AutoTokenizer

from gausscse import GaussCSEModel
from gausscse.data.sources import build_examples, load_source
from gausscse.data.tokenize import tokenize_examples
from gausscse.training.arguments import GaussCSETrainingArguments
from gausscse.training.batch import TripletCollator
from gausscse.training.sentence_transformers_loss import GaussCSESentenceTransformerLoss
from gausscse.training.trainer import GaussCSETrainer

from ..helpers import MINILM_PATH


def triplets(data_dir, count: int) -> dict[str, list[str]]:
    dataset, _ = build_examples([load_source("snli", data_dir)])
    rows = dataset.select(range(count))
    return {"anchor": rows["premise"], "positive": rows["entailment"], "negative": rows["contradiction"]}


@pytest.mark.parametrize("terms", [{}, {"retrieval_weight": 0.5, "simcse_weight": 0.3}])
def test_the_loss_is_gausscse_trainers_on_the_same_batch(spread_model_folder, data_dir, tmp_path, terms):
    """12 SNLI-style triplets whose hypotheses repeat: the sentence-transformers loss on the SentenceTransformer face
    equals ``GaussCSETrainer.compute_loss`` on the collated batch of the same model, with and without extra terms."""
    columns = triplets(data_dir, 12)
    assert len(set(columns["positive"])) < 12  # repeated texts: the masks matter
    st = SentenceTransformer(str(spread_model_folder), trust_remote_code=True, device="cpu").eval()
    features = [st.preprocess(columns[name]) for name in ("anchor", "positive", "negative")]
    with torch.no_grad():
        ours = GaussCSESentenceTransformerLoss(st, **terms)(features, None)

    model = GaussCSEModel.from_pretrained(spread_model_folder).eval()
    args = GaussCSETrainingArguments(output_dir=str(tmp_path / "t"), report_to=[], eval_strategy="no", **terms)
    trainer = GaussCSETrainer(model=model, args=args, train_dataset=[{}])
    tokenizer = AutoTokenizer.from_pretrained(spread_model_folder)
    dataset, _ = build_examples([load_source("snli", data_dir)])
    examples = list(tokenize_examples(dataset.select(range(12)), tokenizer, 128))
    with torch.no_grad():
        expected = trainer.compute_loss(model, TripletCollator.for_tokenizer(tokenizer)(examples))
    assert float(expected) > 0.1
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6)


def test_sentence_transformer_trainer_trains_a_gausscse_model(spread_model_folder, data_dir, tmp_path):
    """Three steps of ``SentenceTransformerTrainer`` with the GaussCSE loss on (anchor, positive, negative) rows: the
    heads move, and the saved folder loads through ``SentenceTransformer`` and ``GaussCSEModel`` alike."""
    st = SentenceTransformer(str(spread_model_folder), trust_remote_code=True, device="cpu")
    before = {name: value.clone() for name, value in st[0].model.named_parameters()}
    args = SentenceTransformerTrainingArguments(
        output_dir=str(tmp_path / "run"), max_steps=3, per_device_train_batch_size=4, learning_rate=1e-3,
        report_to=[], save_strategy="no", use_cpu=True, seed=0,
    )  # fmt: skip
    loss = GaussCSESentenceTransformerLoss(st)
    trainer = SentenceTransformerTrainer(
        model=st, args=args, train_dataset=Dataset.from_dict(triplets(data_dir, 12)), loss=loss
    )
    history = trainer.train()
    assert torch.isfinite(torch.tensor(history.training_loss))
    moved = [name for name, value in st[0].model.named_parameters() if not torch.equal(value, before[name])]
    assert any(name.startswith("logvar_head") for name in moved) and any("encoder" in name for name in moved)
    st.save(str(tmp_path / "saved"))
    sentences = ["A man is outside.", "Nobody sleeps."]
    again = SentenceTransformer(str(tmp_path / "saved"), trust_remote_code=True, device="cpu")
    expected = st.encode(sentences, convert_to_tensor=True)
    torch.testing.assert_close(again.encode(sentences, convert_to_tensor=True), expected, rtol=1e-5, atol=1e-6)
    model = GaussCSEModel.from_pretrained(tmp_path / "saved").eval()
    torch.testing.assert_close(model.encode(sentences).mu, expected, rtol=1e-5, atol=1e-6)
    # the card sentence-transformers writes after training: its usage code loads the folder as written
    card = (tmp_path / "saved" / "README.md").read_text(encoding="utf-8")
    snippet = card.split("```python\n", 1)[1].split("```", 1)[0]
    assert f'SentenceTransformer("{tmp_path / "saved"}", trust_remote_code=True)' in snippet
    namespace: dict = {}
    exec(snippet, namespace)
    assert namespace["scores"].shape == (1, 2)


def test_a_model_that_is_not_gausscse_and_a_one_column_batch_are_refused(spread_model_folder):
    with pytest.raises(ValueError, match=r"needs a GaussCSE SentenceTransformer, its module is"):
        GaussCSESentenceTransformerLoss(SentenceTransformer(str(MINILM_PATH), device="cpu"))
    st = SentenceTransformer(str(spread_model_folder), trust_remote_code=True, device="cpu")
    with pytest.raises(ValueError, match=r"keep_weight: the keep term's targets come from GaussCSETrainer"):
        GaussCSESentenceTransformerLoss(st, keep_weight=0.5)
    with pytest.raises(ValueError, match=r"a GaussCSE batch has 2 or 3 columns \(anchor, positive, negative\), got 1"):
        GaussCSESentenceTransformerLoss(st)([st.preprocess(["A man."])], None)
