"""The Gaussian math against torch.distributions (an independent formulation), in float64."""

import pytest
import torch
from torch.distributions import Normal
from torch.distributions import kl_divergence as torch_kl

from gausscse.model.gaussian import (
    KL_REDUCTIONS,
    REDUCTIONS,
    GaussianEmbeddings,
    kl_divergence,
    kl_divergence_matrix,
    kl_per_dim,
    kl_scale,
    paired_similarity,
    similarity,
    similarity_formula,
    similarity_matrix,
)

TOLERANCE = dict(rtol=1e-6, atol=1e-6)


def random_gaussians(count: int, dim: int, seed: int, dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    mu = torch.tanh(torch.randn(count, dim, generator=generator, dtype=dtype))
    logvar = 1.5 * torch.randn(count, dim, generator=generator, dtype=dtype)
    return mu, logvar


def reference_kl_per_dim(mu_a, logvar_a, mu_b, logvar_b) -> torch.Tensor:
    """KL per dimension by torch.distributions.Normal (σ = exp(logvar / 2))."""
    return torch_kl(Normal(mu_a, torch.exp(0.5 * logvar_a)), Normal(mu_b, torch.exp(0.5 * logvar_b)))


def reference_pairwise_similarity(mu_a, logvar_a, mu_b, logvar_b, reduction: str) -> torch.Tensor:
    """The released code's way: an N×M×d broadcast through torch.distributions."""
    per_dim = reference_kl_per_dim(mu_a[:, None], logvar_a[:, None], mu_b[None], logvar_b[None])
    if reduction == "sum":
        return 1.0 / (1.0 + per_dim.sum(-1))
    if reduction == "mean_kl":
        return 1.0 / (1.0 + per_dim.sum(-1) / per_dim.shape[-1])
    return (1.0 / (1.0 + per_dim)).mean(-1)


def test_elementwise_kl_matches_torch_distributions():
    mu_a, logvar_a = random_gaussians(50, 16, seed=0)
    mu_b, logvar_b = random_gaussians(50, 16, seed=1)
    expected = reference_kl_per_dim(mu_a, logvar_a, mu_b, logvar_b)
    torch.testing.assert_close(kl_per_dim(mu_a, logvar_a, mu_b, logvar_b), expected, **TOLERANCE)
    torch.testing.assert_close(kl_divergence(mu_a, logvar_a, mu_b, logvar_b), expected.sum(-1), **TOLERANCE)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_elementwise_similarity_matches_torch_distributions(reduction):
    mu_a, logvar_a = random_gaussians(40, 12, seed=2)
    mu_b, logvar_b = random_gaussians(40, 12, seed=3)
    expected = reference_pairwise_similarity(mu_a, logvar_a, mu_b, logvar_b, reduction).diagonal()
    torch.testing.assert_close(similarity(mu_a, logvar_a, mu_b, logvar_b, reduction), expected, **TOLERANCE)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pairwise_similarity_matches_torch_distributions(reduction):
    mu_a, logvar_a = random_gaussians(23, 16, seed=4)
    mu_b, logvar_b = random_gaussians(17, 16, seed=5)
    expected = reference_pairwise_similarity(mu_a, logvar_a, mu_b, logvar_b, reduction)
    actual = similarity_matrix(mu_a, logvar_a, mu_b, logvar_b, reduction)
    assert actual.shape == (23, 17)
    torch.testing.assert_close(actual, expected, **TOLERANCE)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_paired_similarity_is_the_matrix_diagonal_in_float32(reduction):
    """float32 Gaussians at the log σ² clamp beside each other (KL terms ~10⁴ that cancel): the row-wise scores of
    ``paired_similarity`` are ``similarity_matrix``'s to one float32 step (both sum the KL in float64 and round once)
    and, for the KL reductions, torch.distributions' in float64 to float32 rounding, where ``similarity``'s float32
    sum is off by more."""
    generator = torch.Generator().manual_seed(8)
    mu_b = torch.tanh(torch.randn(200, 384, generator=generator))
    logvar_b = -10.0 + 0.01 * torch.rand(200, 384, generator=generator)
    mu_a = mu_b + 1e-4 * torch.randn(200, 384, generator=generator)
    logvar_a = logvar_b + 1e-3 * torch.randn(200, 384, generator=generator)
    paired = paired_similarity(mu_a, logvar_a, mu_b, logvar_b, reduction)
    assert paired.dtype == torch.float32 and paired.shape == (200,)
    one_step = dict(rtol=2.0**-23, atol=0.0)
    matrix = similarity_matrix(mu_a, logvar_a, mu_b, logvar_b, reduction)
    torch.testing.assert_close(paired, matrix.diagonal(), **one_step)
    if reduction in KL_REDUCTIONS:  # float32 rounding of the float64 truth: KL, 1 + KL/c, the reciprocal (2⁻²⁴ each)
        inputs = [tensor[:50].double() for tensor in (mu_a, logvar_a, mu_b, logvar_b)]
        expected = reference_pairwise_similarity(*inputs, reduction).diagonal()
        torch.testing.assert_close(paired[:50].double(), expected, rtol=3 * 2.0**-24, atol=0.0)
        float32_sum = similarity(mu_a, logvar_a, mu_b, logvar_b, reduction)[:50].double()
        if reduction == "sum":  # where a float32 sum of the terms loses digits: the case this function is for
            assert ((float32_sum - expected).abs() / expected).max() > 1e-6
    half = paired_similarity(*[tensor.bfloat16() for tensor in (mu_a, logvar_a, mu_b, logvar_b)], reduction)
    assert half.dtype == torch.float32  # half precision in, float32 out (as similarity_matrix)


def test_pairwise_kl_matches_torch_distributions_and_is_zero_on_itself():
    mu_a, logvar_a = random_gaussians(9, 32, seed=6)
    mu_b, logvar_b = random_gaussians(11, 32, seed=7)
    expected = reference_kl_per_dim(mu_a[:, None], logvar_a[:, None], mu_b[None], logvar_b[None]).sum(-1)
    torch.testing.assert_close(kl_divergence_matrix(mu_a, logvar_a, mu_b, logvar_b), expected, **TOLERANCE)
    self_kl = kl_divergence_matrix(mu_a, logvar_a, mu_a, logvar_a).diagonal()
    torch.testing.assert_close(self_kl, torch.zeros_like(self_kl), **TOLERANCE)


def test_chunked_mean_dim_equals_unchunked():
    mu_a, logvar_a = random_gaussians(37, 8, seed=8)
    mu_b, logvar_b = random_gaussians(29, 8, seed=9)
    whole = similarity_matrix(mu_a, logvar_a, mu_b, logvar_b, "mean_dim", chunk_elements=10**9)
    for chunk_elements in (1, 8 * 29, 5 * 8 * 29 + 3):
        chunked = similarity_matrix(mu_a, logvar_a, mu_b, logvar_b, "mean_dim", chunk_elements=chunk_elements)
        torch.testing.assert_close(chunked, whole, rtol=0, atol=0)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_pairwise_gradcheck(reduction):
    mu_a, logvar_a = random_gaussians(4, 5, seed=10)
    mu_b, logvar_b = random_gaussians(3, 5, seed=11)
    inputs = tuple(tensor.clone().requires_grad_() for tensor in (mu_a, logvar_a, mu_b, logvar_b))
    assert torch.autograd.gradcheck(lambda *args: similarity_matrix(*args, reduction=reduction), inputs)


def test_computes_in_float32_under_bf16_autocast_without_overflow():
    mu_a, logvar_a = random_gaussians(8, 384, seed=12, dtype=torch.float32)
    extreme_logvar = torch.full_like(logvar_a, -10.0)
    extreme_logvar[::2] = 10.0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        matrix = similarity_matrix(
            mu_a.bfloat16(), extreme_logvar.bfloat16(), mu_a.bfloat16(), extreme_logvar.flip(0).bfloat16(), "sum"
        )
    assert matrix.dtype == torch.float32
    assert torch.isfinite(matrix).all()
    assert ((matrix > 0) & (matrix <= 1)).all()


def test_asymmetry_broader_gaussian_is_the_entailing_side():
    """sim(narrow‖broad) > sim(broad‖narrow): the hypothesis fits inside the broader premise, not the reverse."""
    mu = torch.zeros(1, 16, dtype=torch.float64)
    broad, narrow = torch.full_like(mu, 1.0), torch.full_like(mu, -1.0)
    for reduction in REDUCTIONS:
        narrow_given_broad = similarity(mu + 0.1, narrow, mu, broad, reduction)
        broad_given_narrow = similarity(mu, broad, mu + 0.1, narrow, reduction)
        assert narrow_given_broad.item() > broad_given_narrow.item()
    same_variance = similarity(mu + 0.1, broad, mu, broad, "sum"), similarity(mu, broad, mu + 0.1, broad, "sum")
    torch.testing.assert_close(*same_variance)


def test_unknown_reduction_names_the_valid_ones():
    mu, logvar = random_gaussians(2, 3, seed=13)
    valid = r"\('sum', 'mean_kl', 'mean_dim'\)"
    with pytest.raises(ValueError, match=rf"similarity_reduction must be one of {valid}, got 'max'"):
        similarity_matrix(mu, logvar, mu, logvar, reduction="max")


def test_empty_inputs_give_empty_matrices():
    mu, logvar = random_gaussians(3, 4, seed=14)
    for reduction in REDUCTIONS:
        assert similarity_matrix(mu[:0], logvar[:0], mu, logvar, reduction).shape == (0, 3)
        assert similarity_matrix(mu, logvar, mu[:0], logvar[:0], reduction).shape == (3, 0)


def test_gaussian_embeddings_helpers_and_checks():
    mu, logvar = random_gaussians(3, 4, seed=15)
    embeddings = GaussianEmbeddings(mu, logvar)
    torch.testing.assert_close(embeddings.var, logvar.exp())
    torch.testing.assert_close(embeddings.std**2, logvar.exp())
    torch.testing.assert_close(embeddings.generality, logvar.sum(-1))
    assert len(embeddings) == 3 and embeddings.dim == 4 and len(embeddings[1:]) == 2
    with pytest.raises(ValueError, match="same shape"):
        GaussianEmbeddings(mu, logvar[:, :2])
    logvar[2, 1] = float("nan")
    with pytest.raises(ValueError, match=r"queries\.logvar\[2\] holds NaN or inf"):
        GaussianEmbeddings(mu, logvar).check("queries")
    with pytest.raises(ValueError, match=r"^x\.mu holds NaN or inf"):
        GaussianEmbeddings(torch.tensor([1.0, float("inf")]), torch.zeros(2)).check("x")


def test_kl_is_an_inner_product_of_feature_maps_in_both_directions():
    from torch.distributions import Independent, Normal, kl_divergence

    from gausscse import kl_feature_map

    mu_q, logvar_q = random_gaussians(5, 16, seed=21, dtype=torch.float32)
    mu_x, logvar_x = random_gaussians(7, 16, seed=22, dtype=torch.float32)

    def reference(mu_a, logvar_a, mu_b, logvar_b):  # KL(a_i‖b_j) from torch.distributions, float64
        a = Independent(Normal(mu_a.double()[:, None], torch.exp(0.5 * logvar_a.double())[:, None]), 1)
        b = Independent(Normal(mu_b.double()[None], torch.exp(0.5 * logvar_b.double())[None]), 1)
        return kl_divergence(a, b)

    query_left, item_right = kl_feature_map(mu_q, logvar_q, "left"), kl_feature_map(mu_x, logvar_x, "right")
    assert query_left.shape == (5, 2 * 16 + 2) and query_left.dtype == torch.float64
    torch.testing.assert_close(query_left @ item_right.T, reference(mu_q, logvar_q, mu_x, logvar_x))  # KL(q‖x)
    item_left, query_right = kl_feature_map(mu_x, logvar_x, "left"), kl_feature_map(mu_q, logvar_q, "right")
    torch.testing.assert_close(query_right @ item_left.T, reference(mu_x, logvar_x, mu_q, logvar_q).T)  # KL(x‖q)
    # the top-k by the sum similarity is the bottom-k by inner product
    by_similarity = similarity_matrix(mu_q, logvar_q, mu_x, logvar_x, "sum").argsort(dim=1, descending=True)
    assert torch.equal((query_left @ item_right.T).argsort(dim=1), by_similarity)
    with pytest.raises(ValueError, match=r"side must be one of \('left', 'right'\), got 'up'"):
        kl_feature_map(mu_q, logvar_q, "up")


def test_mean_kl_is_the_sum_form_of_the_kl_scaled_by_the_dimension():
    """sim_mean_kl = 1/(1 + KL/d) (torch.distributions' KL), the same ranking as sum for any query, and kl_scale
    refuses the reduction that is no function of the total KL."""
    mu_q, logvar_q = random_gaussians(6, 24, seed=30)
    mu_x, logvar_x = random_gaussians(40, 24, seed=31)
    kl = reference_kl_per_dim(mu_q[:, None], logvar_q[:, None], mu_x[None], logvar_x[None]).sum(-1)
    mean_kl = similarity_matrix(mu_q, logvar_q, mu_x, logvar_x, "mean_kl")
    torch.testing.assert_close(mean_kl, 1.0 / (1.0 + kl / 24), **TOLERANCE)
    summed = similarity_matrix(mu_q, logvar_q, mu_x, logvar_x, "sum")
    assert torch.equal(mean_kl.argsort(dim=1, descending=True), summed.argsort(dim=1, descending=True))
    assert (mean_kl >= summed).all()  # the same KL divided by d ≥ 1: less saturated
    assert KL_REDUCTIONS == ("sum", "mean_kl") and kl_scale("sum", 24) == 1 and kl_scale("mean_kl", 24) == 24
    with pytest.raises(ValueError, match=r"'mean_dim' is not a function of the total KL"):
        kl_scale("mean_dim", 24)
    assert similarity_formula("mean_kl", "row", "column") == "1 / (1 + KL(row‖column) / d)"
