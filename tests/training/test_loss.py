"""GaussCSE / SimCSE losses against loop-based transcriptions of the equations, masks, and 2-process DDP."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributions import Normal, kl_divergence

from gausscse.data.tokenize import text_id
from gausscse.model.gaussian import GaussianEmbeddings
from gausscse.training.losses import (
    GAUSSCSE_VARIANTS,
    GaussCSEContrastiveLoss,
    GaussCSELoss,
    KeepTerm,
    NLIBatchEmbeddings,
    RetrievalTerm,
    SupervisedSimCSELoss,
    build_loss,
    denominator_masks,
)

TAU = 0.05


def random_batch(size: int, dim: int = 6, seed: int = 0, dtype=torch.float64, missing=()) -> NLIBatchEmbeddings:
    generator = torch.Generator().manual_seed(seed)

    def gaussians() -> GaussianEmbeddings:
        mu = torch.randn(size, dim, generator=generator, dtype=dtype) * 0.5
        logvar = torch.randn(size, dim, generator=generator, dtype=dtype) * 0.5
        return GaussianEmbeddings(mu.requires_grad_(), logvar.requires_grad_())

    mask = torch.ones(size, dtype=torch.bool)
    mask[list(missing)] = False
    return NLIBatchEmbeddings(gaussians(), gaussians(), gaussians(), mask)


def reference_sim(a: GaussianEmbeddings, i: int, b: GaussianEmbeddings, j: int, reduction: str) -> torch.Tensor:
    """sim(a_i‖b_j) with torch.distributions' KL (independent of gausscse.model.gaussian)."""
    kl = kl_divergence(Normal(a.mu[i], a.std[i]), Normal(b.mu[j], b.std[j]))
    if reduction == "mean_kl":
        return 1 / (1 + kl.mean())
    return 1 / (1 + kl.sum()) if reduction == "sum" else (1 / (1 + kl)).mean()


def reference_loss(batch: NLIBatchEmbeddings, variant: str, reduction: str, skip=lambda block, i, j: False):
    """Eq. 3 term by term: −log e^{sim(s_i⁺‖s_i)/τ} / (V_E + V_C + V_R), averaged over i."""
    pre, ent, con, n = batch.premise, batch.entailment, batch.contradiction, len(batch)
    total = 0.0
    for i in range(n):
        numerator = torch.exp(reference_sim(ent, i, pre, i, reduction) / TAU)
        denominator = 0.0
        for j in range(n):
            if not skip("E", i, j):
                denominator = denominator + torch.exp(reference_sim(ent, j, pre, i, reduction) / TAU)
            if "con" in variant and batch.contradiction_mask[j] and not skip("C", i, j):
                denominator = denominator + torch.exp(reference_sim(con, j, pre, i, reduction) / TAU)
            if "rev" in variant and not skip("R", i, j):
                denominator = denominator + torch.exp(reference_sim(pre, j, ent, i, reduction) / TAU)
        total = total - torch.log(numerator / denominator)
    return total / n


@pytest.mark.parametrize("reduction", ["sum", "mean_dim"])
@pytest.mark.parametrize("variant", GAUSSCSE_VARIANTS)
def test_gausscse_loss_matches_loop_transcription_of_eq3(variant, reduction):
    batch = random_batch(5, seed=GAUSSCSE_VARIANTS.index(variant))
    loss = GaussCSELoss(variant, TAU, reduction)(batch)
    expected = reference_loss(batch, variant, reduction)
    torch.testing.assert_close(loss, expected, rtol=1e-9, atol=1e-9)
    # gradients too
    leaves = [batch.premise.mu, batch.entailment.logvar, batch.contradiction.mu]
    grads = torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)
    expected_grads = torch.autograd.grad(expected, leaves, allow_unused=True, materialize_grads=True)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, rtol=1e-7, atol=1e-9)


def test_block_orientation_follows_eq3():
    batch = random_batch(4, seed=3)
    loss_fn = GaussCSEContrastiveLoss("ent+con+rev", TAU, "sum")
    (entail, contra, reverse), _, offset = loss_fn.similarity_blocks(batch)
    assert offset == 0
    for i, j in [(0, 1), (2, 3), (3, 0)]:
        pre, ent, con = batch.premise, batch.entailment, batch.contradiction
        torch.testing.assert_close(entail[i, j] * TAU, reference_sim(ent, j, pre, i, "sum"))  # sim(s_j⁺‖s_i)
        torch.testing.assert_close(contra[i, j] * TAU, reference_sim(con, j, pre, i, "sum"))  # sim(s_j⁻‖s_i)
        torch.testing.assert_close(reverse[i, j] * TAU, reference_sim(pre, j, ent, i, "sum"))  # sim(s_j‖s_i⁺)
        assert not torch.isclose(entail[i, j], entail[j, i])  # asymmetric: a transposed block would differ


def test_missing_hard_negatives_are_masked_out_of_v_c():
    batch = random_batch(4, seed=5, missing=(1, 3))
    loss = GaussCSELoss("ent+con+rev", TAU, "mean_dim")(batch)
    torch.testing.assert_close(loss, reference_loss(batch, "ent+con+rev", "mean_dim"), rtol=1e-9, atol=1e-9)
    # the placeholder rows of missing contradictions do not matter and get no gradient
    with torch.no_grad():
        batch.contradiction.mu[1] += 100.0
    again = GaussCSELoss("ent+con+rev", TAU, "mean_dim")(batch)
    torch.testing.assert_close(again, loss)
    (grad,) = torch.autograd.grad(again, [batch.contradiction.mu])
    assert torch.all(grad[[1, 3]] == 0) and torch.any(grad[[0, 2]] != 0)


def test_all_contradictions_missing_equals_ent_rev():
    batch = random_batch(3, seed=7, missing=(0, 1, 2))
    loss = GaussCSELoss("ent+con+rev", TAU, "sum")(batch)
    torch.testing.assert_close(loss, GaussCSELoss("ent+rev", TAU, "sum")(batch))
    assert torch.isfinite(loss)


def ids(*rows: tuple[str, str, str | None]) -> torch.Tensor:
    return torch.tensor([[text_id(t) if t is not None else -1 for t in row] for row in rows])


def test_false_negative_masks_from_text_identity():
    # 0: (A, B, C); 1: same premise A, entailment D; 2: premise E whose entailment is "B" again and
    # contradiction "a" (the text of premise A, modulo case/spaces); 3: premise "B" (the text of s_0⁺)
    text_ids = ids(("A", "B", "C"), ("A", "D", None), ("E", " b ", "a"), ("B", "F", "G"))
    masks = denominator_masks(text_ids, text_ids, torch.tensor([True, False, True, True]))
    # V_E row 0: column 1 (s_1⁺ is entailed by A too) and column 2 (same text as s_0⁺) dropped; positive kept
    assert masks.entailment[0].tolist() == [True, False, False, True]
    assert masks.entailment[1].tolist() == [False, True, True, True]
    assert masks.entailment[2].tolist() == [False, True, True, True]
    # V_C row 0: column 1 missing, column 2 ("a") is the anchor's own text
    assert masks.contradiction[0].tolist() == [True, False, False, True]
    assert masks.contradiction[1].tolist() == [True, False, False, True]
    # V_R row 0: column 3's premise has the text of s_0⁺ (sim(x‖x) is no negative)
    assert masks.reverse[0].tolist() == [True, True, True, False]
    assert masks.reverse[3].tolist() == [True, True, True, True]
    # retrieval, row 0 = the hypothesis "B" against the premises: column 1 has the row's own premise A, column 2's
    # premise entails "b" too, column 3's premise is the text "B" itself; row 3 ("F") keeps every premise
    assert masks.retrieval[0].tolist() == [True, False, False, False]
    assert masks.retrieval[3].tolist() == [True, True, True, True]


def test_duplicate_texts_do_not_count_as_negatives_in_the_loss():
    batch = random_batch(4, seed=11)
    batch.text_ids = ids(("A", "B", "C"), ("A", "D", "E"), ("F", "b", "G"), ("H", "I", "J"))
    # the duplicated sentence has the same embedding, as a model would give it
    with torch.no_grad():
        batch.premise.mu[1] = batch.premise.mu[0]
        batch.premise.logvar[1] = batch.premise.logvar[0]
        batch.entailment.mu[2] = batch.entailment.mu[0]
        batch.entailment.logvar[2] = batch.entailment.logvar[0]
    dropped = {("E", 0, 1), ("E", 1, 0), ("E", 0, 2), ("E", 2, 0)}
    loss = GaussCSELoss("ent+con+rev", TAU, "sum")(batch)
    expected = reference_loss(batch, "ent+con+rev", "sum", skip=lambda block, i, j: (block, i, j) in dropped)
    torch.testing.assert_close(loss, expected, rtol=1e-9, atol=1e-9)
    unmasked = reference_loss(batch, "ent+con+rev", "sum")
    assert loss < unmasked


def test_simcse_loss_matches_loop_transcription():
    batch = random_batch(4, seed=13, missing=(2,))
    loss = SupervisedSimCSELoss(TAU)(batch)
    cos = torch.nn.functional.cosine_similarity
    pre, ent, con = batch.premise.mu, batch.entailment.mu, batch.contradiction.mu
    expected = 0.0
    for i in range(4):
        terms = [cos(pre[i], ent[j], dim=0) / TAU for j in range(4)]
        terms += [cos(pre[i], con[j], dim=0) / TAU for j in range(4) if j != 2]
        expected = expected - (cos(pre[i], ent[i], dim=0) / TAU - torch.logsumexp(torch.stack(terms), 0))
    torch.testing.assert_close(loss, expected / 4, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("reduction", ["mean_kl", "sum"])
def test_retrieval_term_is_the_loop_transcription_over_premises(reduction):
    """retrieval_weight λ adds λ · (1/N) Σ_j −log e^{sim(s_j⁺‖s_j)/τ} / Σ_i e^{sim(s_j⁺‖s_i)/τ}: each entailment
    hypothesis ranks its own premise among the batch's premises (KL from torch.distributions)."""
    batch = random_batch(5, seed=23)
    plain = GaussCSELoss("ent+con+rev", TAU, reduction)(batch)
    with_retrieval = GaussCSELoss("ent+con+rev", TAU, reduction, retrieval_weight=0.7)(batch)
    pre, ent, n = batch.premise, batch.entailment, len(batch)
    expected = 0.0
    for j in range(n):
        numerator = torch.exp(reference_sim(ent, j, pre, j, reduction) / TAU)
        denominator = sum(torch.exp(reference_sim(ent, j, pre, i, reduction) / TAU) for i in range(n))
        expected = expected - torch.log(numerator / denominator) / n
    torch.testing.assert_close(with_retrieval, plain + 0.7 * expected, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(RetrievalTerm(TAU, reduction)(batch), expected, rtol=1e-9, atol=1e-9)  # the module
    with pytest.raises(ValueError, match="retrieval_weight must be a finite number >= 0, got -1"):
        GaussCSELoss("ent", TAU, reduction, retrieval_weight=-1)
    with pytest.raises(ValueError, match="keep_weight must be a finite number >= 0, got nan"):
        SupervisedSimCSELoss(TAU, keep_weight=float("nan"))
    with pytest.raises(TypeError):  # the terms go by name: a fourth positional argument is not a weight
        GaussCSELoss("ent", TAU, reduction, 0.5)
    assert GaussCSELoss("ent", TAU, reduction).retrieval_weight == 0.0  # unset: off
    assert GaussCSELoss("ent", TAU, reduction, frozen_mean=True).retrieval_weight == 1.0  # the frozen μ path's default
    assert GaussCSELoss("ent", TAU, reduction, frozen_mean=True, retrieval_weight=0.25).retrieval_weight == 0.25


def test_the_composition_is_the_weighted_sum_of_its_modules():
    """GaussCSELoss = GaussCSEContrastiveLoss + Σ weight × term, each term the module of its name; the keep term
    without the starting encoder's vectors is an error naming them."""
    batch = random_batch(5, seed=29)
    batch.teacher = torch.randn(15, 7, dtype=torch.float64, generator=torch.Generator().manual_seed(30))
    weights = {"retrieval_weight": 0.4, "simcse_weight": 0.3, "keep_weight": 0.2}
    loss = GaussCSELoss("ent+con", TAU, "sum", retrieval_kl_weight=0.1, **weights)(batch)
    expected = (
        GaussCSEContrastiveLoss("ent+con", TAU, "sum")(batch)
        + 0.4 * RetrievalTerm(TAU, "sum", kl_weight=0.1)(batch)
        + 0.3 * SupervisedSimCSELoss(TAU)(batch)
        + 0.2 * KeepTerm()(batch)
    )
    torch.testing.assert_close(loss, expected, rtol=1e-9, atol=1e-9)
    batch.teacher = None
    with pytest.raises(ValueError, match=r"the keep term needs NLIBatchEmbeddings\.teacher"):
        GaussCSELoss("ent+con", TAU, "sum", keep_weight=0.2)(batch)


def test_retrieval_term_by_the_search_score_is_its_loop_transcription():
    """retrieval_kl_weight λ_r: the retrieval term's logits are cos(μ_{s_j⁺}, μ_{s_i}) − λ_r·KL(s_j⁺‖s_i)/d (KL from
    torch.distributions), not the similarity."""
    batch = random_batch(5, seed=24)
    plain = GaussCSELoss("ent+con+rev", TAU, "mean_kl")(batch)
    searched = GaussCSELoss("ent+con+rev", TAU, "mean_kl", retrieval_weight=0.7, retrieval_kl_weight=0.3)(batch)
    pre, ent, n = batch.premise, batch.entailment, len(batch)
    dim = pre.mu.shape[-1]

    def score(j: int, i: int) -> torch.Tensor:
        kl = 1 / reference_sim(ent, j, pre, i, "sum") - 1
        return torch.cosine_similarity(ent.mu[j], pre.mu[i], dim=0) - 0.3 * kl / dim

    expected = 0.0
    for j in range(n):
        logits = torch.stack([score(j, i) / TAU for i in range(n)])
        expected = expected - (logits[j] - torch.logsumexp(logits, 0)) / n
    torch.testing.assert_close(searched, plain + 0.7 * expected, rtol=1e-9, atol=1e-9)
    with pytest.raises(ValueError, match="retrieval_kl_weight must be a finite number >= 0, got -1"):
        GaussCSELoss("ent", TAU, "mean_kl", retrieval_kl_weight=-1)


def test_auxiliary_simcse_term_is_added_with_its_weight():
    batch = random_batch(4, seed=17)
    plain = GaussCSELoss("ent+con+rev", TAU, "mean_dim")(batch)
    with_aux = GaussCSELoss("ent+con+rev", TAU, "mean_dim", simcse_weight=0.5)(batch)
    torch.testing.assert_close(with_aux, plain + 0.5 * SupervisedSimCSELoss(TAU)(batch))


def grads(loss: torch.Tensor, batch: NLIBatchEmbeddings) -> dict[str, torch.Tensor]:
    """d loss / d μ and d loss / d log σ² of the three sides, by autograd."""
    sides = {"premise": batch.premise, "entailment": batch.entailment, "contradiction": batch.contradiction}
    tensors = {f"{name}.{part}": getattr(side, part) for name, side in sides.items() for part in ("mu", "logvar")}
    values = torch.autograd.grad(loss, list(tensors.values()), allow_unused=True, materialize_grads=True)
    return dict(zip(tensors, values, strict=True))


@pytest.mark.parametrize("scale", [0.0, 0.3])
def test_kl_mean_gradient_scales_only_what_the_gaussian_term_sends_into_mu(scale):
    """Same loss value; the gradient into μ = scale × the GaussCSE term's + the other terms' in full, into log σ²
    unchanged (each part by autograd of the separate modules)."""
    batch = random_batch(5, seed=31, missing=(2,))
    terms = {"retrieval_weight": 0.5, "retrieval_kl_weight": 0.1, "simcse_weight": 0.7}
    scaled = GaussCSELoss("ent+con+rev", TAU, "mean_kl", kl_mean_gradient=scale, **terms)(batch)
    full = GaussCSELoss("ent+con+rev", TAU, "mean_kl", **terms)(batch)
    torch.testing.assert_close(scaled, full, rtol=0, atol=0)
    gaussian = grads(GaussCSEContrastiveLoss("ent+con+rev", TAU, "mean_kl")(batch), batch)
    others = grads(
        0.5 * RetrievalTerm(TAU, "mean_kl", kl_weight=0.1)(batch) + 0.7 * SupervisedSimCSELoss(TAU)(batch), batch
    )
    got = grads(scaled, batch)
    for name, value in got.items():
        weight = scale if name.endswith(".mu") else 1.0
        torch.testing.assert_close(value, weight * gaussian[name] + others[name], rtol=1e-9, atol=1e-12)
    assert got["premise.mu"].abs().sum() > 0  # the other terms still reach μ
    with pytest.raises(ValueError, match=r"kl_mean_gradient must be a finite number >= 0, got -0\.5"):
        GaussCSELoss("ent", TAU, "mean_kl", kl_mean_gradient=-0.5)


def test_loss_is_fp32_and_finite_under_bf16_autocast():
    batch = random_batch(6, seed=19, dtype=torch.bfloat16, missing=(4,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = GaussCSELoss("ent+con+rev", TAU, "sum")(batch)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert torch.isfinite(batch.premise.mu.grad).all()


def test_unknown_loss_names_list_the_valid_ones():
    with pytest.raises(ValueError, match=r"ent\+con\+rev.*simcse"):
        build_loss("ent+neg", TAU, "sum")
    with pytest.raises(ValueError, match="valid variants"):
        GaussCSELoss("rev", TAU, "sum")
    for bad in (0.0, -0.05, float("nan")):
        with pytest.raises(ValueError, match="temperature must be positive"):
            GaussCSELoss("ent", bad, "sum")
        with pytest.raises(ValueError, match="temperature must be positive"):
            SupervisedSimCSELoss(bad)
    with pytest.raises(ValueError, match="similarity_reduction must be one of"):
        GaussCSELoss("ent", TAU, "max")
    with pytest.raises(TypeError, match="reduction"):  # no default: the caller passes the model's
        GaussCSELoss("ent", TAU)  # type: ignore[call-arg]
    assert isinstance(build_loss("simcse", TAU, "sum"), SupervisedSimCSELoss)


def test_the_simcse_loss_says_which_term_flags_it_ignores(caplog):
    with caplog.at_level(logging.WARNING, logger="gausscse.training.losses"):
        loss = build_loss("simcse", TAU, "sum", retrieval_weight=1.0, retrieval_kl_weight=None, keep_weight=0.5)
    assert loss.keep_weight == 0.5 and "ignored: --retrieval_weight 1.0" in caplog.text
    assert "keep_weight 0.5" not in caplog.text and "retrieval_kl_weight" not in caplog.text


# ------------------------------------------------------------------------------------------ 2-process DDP (gloo)

WORLD = 2
DDP_BATCH = 6


def ddp_batch(dtype=torch.float64) -> NLIBatchEmbeddings:
    batch = random_batch(DDP_BATCH, seed=23, dtype=dtype, missing=(1, 4))
    batch.text_ids = ids(*[(f"p{k % 4}", f"h{k}", f"c{k}") for k in range(DDP_BATCH)])  # p0, p1 repeat across ranks
    return batch


def rows(batch: NLIBatchEmbeddings, start: int, stop: int) -> NLIBatchEmbeddings:
    def part(embeddings: GaussianEmbeddings) -> GaussianEmbeddings:
        return GaussianEmbeddings(
            embeddings.mu[start:stop].detach().clone().requires_grad_(),
            embeddings.logvar[start:stop].detach().clone().requires_grad_(),
        )

    return NLIBatchEmbeddings(
        part(batch.premise),
        part(batch.entailment),
        part(batch.contradiction),
        batch.contradiction_mask[start:stop],
        batch.text_ids[start:stop],
    )


def losses_under_ddp() -> tuple:
    return (
        ("gausscse", GaussCSELoss("ent+con+rev", TAU, "mean_dim", simcse_weight=0.3, retrieval_weight=0.5)),
        ("simcse", SupervisedSimCSELoss(TAU)),
    )


def loss_and_grads(loss_fn, batch: NLIBatchEmbeddings) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """The loss and its gradients with respect to three of the batch's leaves."""
    loss = loss_fn(batch)
    leaves = [batch.premise.mu, batch.entailment.logvar, batch.contradiction.mu]
    return loss, torch.autograd.grad(loss, leaves, allow_unused=True, materialize_grads=True)


def _ddp_worker(rank: int, init_file: str, output: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    share = DDP_BATCH // WORLD
    local = rows(ddp_batch(), rank * share, (rank + 1) * share)
    results = {}
    for name, loss_fn in losses_under_ddp():
        loss, grads = loss_and_grads(loss_fn, local)
        results[name] = (loss.detach(), [grad / WORLD for grad in grads])  # DDP averages over processes
    torch.save(results, f"{output}.{rank}")
    dist.destroy_process_group()


def test_two_process_gather_equals_single_process_on_concatenated_batch(tmp_path, monkeypatch):
    output = str(tmp_path / "result")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # for the spawned workers only: later tests' subprocesses keep theirs
    mp.spawn(_ddp_worker, args=(str(tmp_path / "init"), output), nprocs=WORLD, join=True)
    per_rank = [torch.load(f"{output}.{rank}") for rank in range(WORLD)]
    full = ddp_batch()
    share = DDP_BATCH // WORLD
    for name, loss_fn in losses_under_ddp():
        loss, grads = loss_and_grads(loss_fn, full)
        torch.testing.assert_close(sum(r[name][0] for r in per_rank) / WORLD, loss.detach(), rtol=1e-10, atol=1e-10)
        for rank, result in enumerate(per_rank):
            for local_grad, grad in zip(result[name][1], grads, strict=True):
                expected = grad[rank * share : (rank + 1) * share]
                torch.testing.assert_close(local_grad, expected, rtol=1e-8, atol=1e-10)
