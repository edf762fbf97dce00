"""Closed-form math for diagonal Gaussian sentence embeddings.

A sentence is a diagonal Gaussian N(μ, diag σ²) stored as ``(mu, logvar)`` with
``logvar = log σ²``. Every function here is pure, works on any leading batch shape,
and computes in float32 (or float64 if given float64) even under autocast.

Conventions (Yoda et al., EACL 2024):

* ``kl(a‖b) = KL(N_a ‖ N_b)``; ``sim(a‖b) = 1 / (1 + KL(N_a ‖ N_b))`` — asymmetric.
* A hypothesis entailed by a premise is scored ``sim(hyp‖pre)``: it is high when the
  premise's Gaussian is broad enough to cover the hypothesis's, so the entailing side
  (the premise) ends up with the **larger** variance.

Three reductions over the d dimensions:

* ``"sum"`` — the paper's eq. 2: ``sim = 1 / (1 + Σ_k KL_k)`` with the full KL.
* ``"mean_kl"`` — ``sim = 1 / (1 + KL / d)``: the full KL scaled by 1/d, so unrelated sentences are not all
  saturated at sim ≈ 0 (the total KL sums d terms, so it grows with the dimension).
* ``"mean_dim"`` — the released code: ``sim = mean_k 1 / (1 + KL_k)``.

``"sum"`` and ``"mean_kl"`` are decreasing functions of the total KL (``KL_REDUCTIONS``): for a fixed query they
rank alike, their all-pairs matrix is one matrix product and search on an inner-product index is exact.
``"mean_dim"`` is not a function of the total KL.

This file ships next to the model weights (Hub custom code): it depends on torch only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

REDUCTIONS = ("sum", "mean_kl", "mean_dim")
# The reductions of the form sim = 1 / (1 + KL / scale): monotone in the total KL (see kl_scale).
KL_REDUCTIONS = ("sum", "mean_kl")
# sim(a‖b) of each reduction, written out (the demo's and the model card's texts): see similarity_formula.
SIMILARITY_FORMULAS = {
    "sum": "1 / (1 + KL({a}‖{b}))",
    "mean_kl": "1 / (1 + KL({a}‖{b}) / d)",
    "mean_dim": "mean_k 1 / (1 + KL_k({a}‖{b}))",
}
# |log σ²| above this is refused: exp(±30) and the variance ratios of the KL (up to e^60 per dimension) stay far
# inside float32's range (e^88), so the similarity is never inf or NaN.
LOGVAR_BOUND = 30.0

# Above this many elements an N×M×d intermediate is split into row chunks.
DEFAULT_CHUNK_ELEMENTS = 1 << 24


def check_reduction(reduction: str) -> str:
    """Return ``reduction`` if it is a known name, else raise ``ValueError`` listing the valid ones."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"similarity_reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return reduction


def similarity_formula(reduction: str, a: str = "a", b: str = "b") -> str:
    """sim(a‖b) of ``reduction`` written out, e.g. ``1 / (1 + KL(a‖b) / d)`` for ``"mean_kl"``; ``a``, ``b``: the
    names of the two sides."""
    return SIMILARITY_FORMULAS[check_reduction(reduction)].format(a=a, b=b)


def kl_scale(reduction: str, dim: int) -> int:
    """The divisor c in sim = 1 / (1 + KL / c) of a ``KL_REDUCTIONS`` member: 1 for ``"sum"``, d for ``"mean_kl"``.

    ``ValueError`` for ``"mean_dim"`` (mean_k 1/(1 + KL_k) is no function of the total KL) and unknown names.
    """
    if check_reduction(reduction) not in KL_REDUCTIONS:
        raise ValueError(
            f"similarity_reduction {reduction!r} is not a function of the total KL (those are {KL_REDUCTIONS})"
        )
    if dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    return 1 if reduction == "sum" else dim


def as_float32(tensor: torch.Tensor) -> torch.Tensor:
    """Upcast half precision to float32 (float64 stays float64)."""
    return tensor if tensor.dtype == torch.float64 else tensor.float()


def kl_per_dim(mu_a: torch.Tensor, logvar_a: torch.Tensor, mu_b: torch.Tensor, logvar_b: torch.Tensor) -> torch.Tensor:
    """Per-dimension KL of paired diagonal Gaussians, shape ``(..., d)``.

    KL_k(a‖b) = ½ [ logσ_b,k² − logσ_a,k² + σ_a,k²/σ_b,k² + (μ_a,k − μ_b,k)²/σ_b,k² − 1 ]

    Inputs broadcast against each other; the result is float32 (float64 for float64 input).
    """
    with torch.autocast(device_type=mu_a.device.type, enabled=False):
        mu_a, logvar_a, mu_b, logvar_b = map(as_float32, (mu_a, logvar_a, mu_b, logvar_b))
        inv_var_b = torch.exp(-logvar_b)
        if torch.is_grad_enabled() and any(tensor.requires_grad for tensor in (mu_a, logvar_a, mu_b, logvar_b)):
            return 0.5 * (logvar_b - logvar_a + (torch.exp(logvar_a) + (mu_a - mu_b) ** 2) * inv_var_b - 1.0)
        # Nothing to differentiate: the same expression in place, in one buffer of the broadcast shape (a third of
        # the memory traffic; search re-scoring runs this over queries × candidates × d).
        shape = torch.broadcast_shapes(mu_a.shape, logvar_a.shape, mu_b.shape, logvar_b.shape)
        work = (mu_a - mu_b).broadcast_to(shape).contiguous()
        work.square_().add_(torch.exp(logvar_a)).mul_(inv_var_b)
        return work.add_(logvar_b).sub_(logvar_a).sub_(1.0).mul_(0.5)


def kl_divergence(
    mu_a: torch.Tensor, logvar_a: torch.Tensor, mu_b: torch.Tensor, logvar_b: torch.Tensor
) -> torch.Tensor:
    """Full KL(N_a ‖ N_b) of paired diagonal Gaussians, shape ``(...)``.

    KL(a‖b) = ½ [ Σlogσ_b² − Σlogσ_a² + Σσ_a²/σ_b² + Σ(μ_a − μ_b)²/σ_b² − d ]
    """
    return kl_per_dim(mu_a, logvar_a, mu_b, logvar_b).sum(dim=-1)


def similarity_from_kl(kl: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """sim = 1 / (1 + KL / scale), mapping KL ∈ [0, ∞) to (0, 1]; ``scale`` is [`kl_scale`] of the reduction."""
    return 1.0 / (1.0 + kl / scale)


def similarity(
    mu_a: torch.Tensor,
    logvar_a: torch.Tensor,
    mu_b: torch.Tensor,
    logvar_b: torch.Tensor,
    reduction: str,
) -> torch.Tensor:
    """Row-wise asymmetric similarity sim(a_i‖b_i), shape ``(...)``; ``reduction``: the model's
    ``config.similarity_reduction``.

    sum:      sim(a‖b) = 1 / (1 + Σ_k KL_k(a‖b))          (paper, eq. 2)
    mean_kl:  sim(a‖b) = 1 / (1 + (1/d) Σ_k KL_k(a‖b))    (the full KL scaled by 1/d)
    mean_dim: sim(a‖b) = (1/d) Σ_k 1 / (1 + KL_k(a‖b))     (released code)
    """
    per_dim = kl_per_dim(mu_a, logvar_a, mu_b, logvar_b)
    reduction = check_reduction(reduction)
    if reduction == "mean_dim":
        return similarity_from_kl(per_dim).mean(dim=-1)
    return similarity_from_kl(per_dim.sum(dim=-1), kl_scale(reduction, per_dim.shape[-1]))


def paired_similarity(
    mu_a: torch.Tensor,
    logvar_a: torch.Tensor,
    mu_b: torch.Tensor,
    logvar_b: torch.Tensor,
    reduction: str,
) -> torch.Tensor:
    """Row-wise sim(a_i‖b_i), shape ``(...)``, with the values [`similarity_matrix`] gives the same pairs: for
    ``"sum"`` and ``"mean_kl"`` the total KL is summed in float64 and the similarity computed from it in the inputs'
    float dtype (float32 for half precision); ``"mean_dim"`` as [`similarity`].

    For scoring and ranking (``model.similarity_pairwise``, the re-score of every search backend): near the
    log σ² clamp a KL term reaches ~10⁴, and a float32 sum of d of them loses the digits that separate close
    candidates, so two float32 formulations can order them differently on different CPUs. [`similarity`] is the
    differentiable float32 form of the loss.
    """
    if check_reduction(reduction) not in KL_REDUCTIONS:
        return similarity(mu_a, logvar_a, mu_b, logvar_b, reduction)
    with torch.autocast(device_type=mu_a.device.type, enabled=False):
        kl = kl_divergence(mu_a.double(), logvar_a.double(), mu_b.double(), logvar_b.double()).clamp_min(0.0)
        return similarity_from_kl(kl.to(as_float32(mu_a).dtype), kl_scale(reduction, mu_a.shape[-1]))


KL_SIDES = ("left", "right")
# The two ways to search by entailment, as the kl_feature_map sides of (query, stored item): "entailing" scores
# sim(q‖x), KL(q‖x) = ⟨A(q), B(x)⟩ (the items that entail q); "entailed_by" scores sim(x‖q), KL(x‖q) = ⟨A(x), B(q)⟩.
SEARCH_DIRECTIONS = {"entailing": ("left", "right"), "entailed_by": ("right", "left")}


def kl_feature_map(mu: torch.Tensor, logvar: torch.Tensor, side: str) -> torch.Tensor:
    """Vectors of 2d + 2 dimensions whose inner products are KL divergences: KL(a‖b) = ⟨A(a), B(b)⟩ with

        A(a) = ½ [ σ_a² + μ_a²,  −2 μ_a,  1,  −Σ_k logσ_a,k² − d ]                 (``side="left"``, a ∈ first slot)
        B(b) = [ 1/σ_b²,  μ_b/σ_b²,  Σ_k logσ_b,k² + Σ_k μ_b,k²/σ_b,k²,  1 ]       (``side="right"``, b ∈ second slot)

    the expansion of KL(a‖b) = ½[Σlogσ_b² − Σlogσ_a² + Σσ_a²/σ_b² + Σ(μ_a − μ_b)²/σ_b² − d]. Since
    sim = 1/(1 + KL/c) decreases with KL, the top-k by the ``sum`` or ``mean_kl`` similarity is the bottom-k by this
    inner product: exact search on any inner-product index. Searching the sentences x that entail a query q (scored
    sim(q‖x)) stores B(x) and queries with A(q); searching what q entails (sim(x‖q)) stores A(x) and queries with B(q).
    Computed and returned in float64: the expanded square cancels in float32 at small variances.
    ``mu, logvar``: ``(N, d)`` → ``(N, 2d + 2)``.
    """
    if side not in KL_SIDES:
        raise ValueError(f"side must be one of {KL_SIDES}, got {side!r}")
    mu, logvar = mu.double(), logvar.double()
    ones = torch.ones_like(logvar[..., :1])
    if side == "left":
        constant = -logvar.sum(dim=-1, keepdim=True) - mu.shape[-1]
        return 0.5 * torch.cat([torch.exp(logvar) + mu**2, -2.0 * mu, ones, constant], dim=-1)
    inverse_variance = torch.exp(-logvar)
    constant = logvar.sum(dim=-1, keepdim=True) + (mu**2 * inverse_variance).sum(dim=-1, keepdim=True)
    return torch.cat([inverse_variance, mu * inverse_variance, constant, ones], dim=-1)


def kl_divergence_matrix(
    mu_a: torch.Tensor, logvar_a: torch.Tensor, mu_b: torch.Tensor, logvar_b: torch.Tensor
) -> torch.Tensor:
    """All-pairs KL(N_{a_i} ‖ N_{b_j}), shape ``(N, M)``, from one matrix product: KL_ij = ⟨A(a_i), B(b_j)⟩ with the
    (2d + 2)-dimensional maps of [`kl_feature_map`].

    Memory is O(N·M + (N+M)·d): no N×M×d tensor is ever built. The expanded square cancels catastrophically in
    float32 when the variances are small (with log σ² = −10 and d = 768 its terms reach ~10⁸ while KL(a‖a) = 0), so
    the product runs in float64 and the result is returned in the inputs' float dtype (float32 for half-precision
    inputs): exact to float32 rounding over the whole log σ² clamp range.
    ``mu_a, logvar_a``: ``(N, d)``; ``mu_b, logvar_b``: ``(M, d)``.
    """
    with torch.autocast(device_type=mu_a.device.type, enabled=False):
        kl = kl_feature_map(mu_a, logvar_a, "left") @ kl_feature_map(mu_b, logvar_b, "right").T
        # Rounding in the expanded square can dip a hair below zero when a ≈ b.
        return kl.clamp_min(0.0).to(as_float32(mu_a).dtype)


def similarity_matrix(
    mu_a: torch.Tensor,
    logvar_a: torch.Tensor,
    mu_b: torch.Tensor,
    logvar_b: torch.Tensor,
    reduction: str,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> torch.Tensor:
    """All-pairs asymmetric similarity S_ij = sim(a_i‖b_j), shape ``(N, M)``; ``reduction``: the model's
    ``config.similarity_reduction``.

    sum:      S_ij = 1 / (1 + KL(a_i‖b_j)), via :func:`kl_divergence_matrix` (matrix products).
    mean_kl:  S_ij = 1 / (1 + KL(a_i‖b_j) / d), the same matrix product.
    mean_dim: S_ij = (1/d) Σ_k 1 / (1 + KL_k(a_i‖b_j)); the N×M×d intermediate is built in row
              chunks of at most ``chunk_elements`` elements, so memory stays bounded.
    """
    if check_reduction(reduction) in KL_REDUCTIONS:
        scale = kl_scale(reduction, mu_a.shape[-1])
        return similarity_from_kl(kl_divergence_matrix(mu_a, logvar_a, mu_b, logvar_b), scale)
    rows_per_chunk = max(1, chunk_elements // max(1, mu_b.shape[0] * mu_b.shape[-1]))
    chunks = [
        similarity(
            mu_a[start : start + rows_per_chunk, None, :],
            logvar_a[start : start + rows_per_chunk, None, :],
            mu_b[None, :, :],
            logvar_b[None, :, :],
            reduction="mean_dim",
        )
        for start in range(0, mu_a.shape[0], rows_per_chunk)
    ]
    if not chunks:
        return mu_a.new_zeros((0, mu_b.shape[0]), dtype=as_float32(mu_a).dtype)
    return torch.cat(chunks, dim=0)


def cosine_matrix(mu_a: torch.Tensor, mu_b: torch.Tensor) -> torch.Tensor:
    """All-pairs cos(μ_{a_i}, μ_{b_j}), shape ``(N, M)``, float32 (float64 for float64 inputs)."""
    mu_a, mu_b = as_float32(mu_a), as_float32(mu_b)
    return torch.nn.functional.normalize(mu_a, dim=-1) @ torch.nn.functional.normalize(mu_b, dim=-1).T


def search_score_from(cosine: torch.Tensor, kl: torch.Tensor, kl_weight: float, dim: int) -> torch.Tensor:
    """The search score cos − λ · KL / d from the cosine and the KL of the same pairs (λ = ``kl_weight`` ≥ 0)."""
    if not 0 <= kl_weight < float("inf"):
        raise ValueError(f"kl_weight must be a number >= 0, got {kl_weight}")
    return cosine if kl_weight == 0 else cosine - kl_weight * kl / dim


def search_score_matrix(
    mu_a: torch.Tensor, logvar_a: torch.Tensor, mu_b: torch.Tensor, logvar_b: torch.Tensor, kl_weight: float
) -> torch.Tensor:
    """All-pairs search score S_ij = cos(μ_{a_i}, μ_{b_j}) − λ · KL(a_i‖b_j) / d, shape ``(N, M)`` (float32; float64 for
    float64 inputs).

    Relevance (the cosine of the means: the backbone's own when μ is its embedding) plus the model's direction (the
    KL term: low when b covers a, i.e. b entails a). λ = ``kl_weight`` ≥ 0; λ = 0 is the cosine. Both terms are
    inner products of per-sentence vectors, so the score is one inner product too and an inner-product index
    searches it exactly. The KL runs through [`kl_divergence_matrix`] (float64 product); float64 inputs give the score
    computed in float64 throughout (what a search ranks by: [`paired_search_score`] re-scores the same way).
    """
    with torch.autocast(device_type=mu_a.device.type, enabled=False):
        kl = kl_divergence_matrix(mu_a, logvar_a, mu_b, logvar_b) if kl_weight else None
        return search_score_from(cosine_matrix(mu_a, mu_b), kl, kl_weight, mu_a.shape[-1])


def search_map_width(dim: int, kl_weight: float | None) -> int:
    """The width of [`query_map`] / [`stored_map`] vectors: 2d + 2 (the KL maps), 3d + 2 with the search score."""
    return 2 * dim + 2 if kl_weight is None else 3 * dim + 2


def query_map(mu: torch.Tensor, logvar: torch.Tensor, direction: str, kl_weight: float | None = None) -> torch.Tensor:
    """The vector a search sends for a query, float64: with the [`stored_map`] of an item, ⟨query, stored⟩ is the
    score the search ranks by, highest first.

    * ``kl_weight=None``: −KL — for ``direction="entailing"`` −A(q) (so ⟨−A(q), B(x)⟩ = −KL(q‖x)), for
      ``"entailed_by"`` −B(q) (−KL(x‖q)), with A, B of [`kl_feature_map`]: the ``sum`` and ``mean_kl`` rankings;
    * ``kl_weight=λ``: the search score cos(μ_q, μ_x) − λ · KL / d — ``[μ_q/‖μ_q‖, −(λ/d) A(q)]`` (or B(q)).

    ``mu, logvar``: ``(N, d)`` → ``(N, search_map_width(d, kl_weight))``.
    """
    kl_map = -kl_feature_map(mu, logvar, SEARCH_DIRECTIONS[direction][0])
    if kl_weight is None:
        return kl_map
    unit = torch.nn.functional.normalize(mu.double(), dim=-1)
    return torch.cat([unit, (kl_weight / mu.shape[-1]) * kl_map], dim=-1)


def stored_map(mu: torch.Tensor, logvar: torch.Tensor, direction: str, kl_weight: float | None = None) -> torch.Tensor:
    """The vector an index stores for an item, float64 (see [`query_map`]): B(x) for ``direction="entailing"``, A(x)
    for ``"entailed_by"``; with a search score (``kl_weight`` not ``None``; its value is the query's alone)
    ``[μ_x/‖μ_x‖, B(x)]`` (or A(x)). ``(N, d)`` → ``(N, search_map_width(d, kl_weight))``."""
    kl_map = kl_feature_map(mu, logvar, SEARCH_DIRECTIONS[direction][1])
    if kl_weight is None:
        return kl_map
    return torch.cat([torch.nn.functional.normalize(mu.double(), dim=-1), kl_map], dim=-1)


def paired_search_score(
    mu_q: torch.Tensor,
    logvar_q: torch.Tensor,
    mu_x: torch.Tensor,
    logvar_x: torch.Tensor,
    direction: str,
    kl_weight: float,
) -> torch.Tensor:
    """Row-wise search score of queries and items: cos(μ_q, μ_x) − λ · KL / d with KL(q‖x) (``"entailing"``) or
    KL(x‖q) (``"entailed_by"``), the KL summed in float64 (as [`paired_similarity`]); float32 (float64 inputs:
    float64)."""
    with torch.autocast(device_type=mu_q.device.type, enabled=False):
        pairs = (mu_q, logvar_q, mu_x, logvar_x) if direction == "entailing" else (mu_x, logvar_x, mu_q, logvar_q)
        kl = kl_divergence(*(tensor.double() for tensor in pairs)).clamp_min(0.0)
        normalize = torch.nn.functional.normalize
        cosine = (normalize(mu_q.double(), dim=-1) * normalize(mu_x.double(), dim=-1)).sum(dim=-1)
        return search_score_from(cosine, kl, kl_weight, mu_q.shape[-1]).to(as_float32(mu_q).dtype)


def check_finite(argument: str, tensor: torch.Tensor) -> None:
    """Raise ``ValueError`` naming ``argument`` (and the first bad row of a batch) if ``tensor`` holds NaN or inf."""
    rows = tensor.flatten(1) if tensor.ndim > 1 else tensor.reshape(1, -1)
    bad_rows = ~torch.isfinite(rows).all(dim=-1)
    if bool(bad_rows.any()):
        where = f"{argument}[{int(bad_rows.nonzero()[0, 0])}]" if tensor.ndim > 1 else argument
        raise ValueError(f"{where} holds NaN or inf values")


@dataclass
class GaussianEmbeddings:
    """A batch of diagonal Gaussian embeddings N(μ, diag σ²).

    Attributes:
        mu: means, shape ``(N, d)`` (or ``(d,)`` for one sentence).
        logvar: log-variances log σ², same shape as ``mu``.
    """

    mu: torch.Tensor
    logvar: torch.Tensor

    def __post_init__(self) -> None:
        # numpy arrays and nested lists become float tensors; anything else is refused by name
        for name in ("mu", "logvar"):
            value = getattr(self, name)
            if not isinstance(value, torch.Tensor):
                try:
                    value = torch.as_tensor(value, dtype=torch.float32)
                except (TypeError, ValueError, RuntimeError) as error:
                    kind = type(value).__name__
                    raise TypeError(f"{name} must be a tensor or an array of numbers, got {kind}") from error
                setattr(self, name, value)
            if not value.is_floating_point():
                setattr(self, name, value.float())
        if self.mu.shape != self.logvar.shape:
            raise ValueError(
                f"mu and logvar must have the same shape, got {tuple(self.mu.shape)} and {tuple(self.logvar.shape)}"
            )
        if self.mu.ndim not in (1, 2):
            raise ValueError(f"mu and logvar must be (d,) or (N, d), got shape {tuple(self.mu.shape)}")

    @property
    def var(self) -> torch.Tensor:
        """σ² = exp(logvar)."""
        return torch.exp(self.logvar)

    @property
    def std(self) -> torch.Tensor:
        """σ = exp(logvar / 2)."""
        return torch.exp(0.5 * self.logvar)

    @property
    def generality(self) -> torch.Tensor:
        """Σ_k log σ_k²: the total log-variance; GaussCSE training makes it larger on the entailing side (premise)."""
        return self.logvar.sum(dim=-1)

    @property
    def dim(self) -> int:
        """The dimension d of the Gaussians."""
        return self.mu.shape[-1]

    def __len__(self) -> int:
        return self.mu.shape[0] if self.mu.ndim > 1 else 1

    def __getitem__(self, index) -> GaussianEmbeddings:
        return GaussianEmbeddings(self.mu[index], self.logvar[index])

    def to(self, *args, **kwargs) -> GaussianEmbeddings:
        """Move or cast both tensors, as ``torch.Tensor.to``."""
        return GaussianEmbeddings(self.mu.to(*args, **kwargs), self.logvar.to(*args, **kwargs))

    def check(self, argument: str) -> GaussianEmbeddings:
        """Raise ``ValueError`` naming ``argument`` and the row if μ or log σ² is NaN/inf or |log σ²| exceeds
        ``LOGVAR_BOUND``; return self."""
        check_finite(f"{argument}.mu", self.mu)
        check_finite(f"{argument}.logvar", self.logvar)
        if self.logvar.numel() and float(self.logvar.abs().max()) > LOGVAR_BOUND:
            raise ValueError(
                f"{argument}.logvar holds values beyond ±{LOGVAR_BOUND:g} (max |log σ²| = "
                f"{float(self.logvar.abs().max()):g}): exp(log σ²) would overflow the similarity"
            )
        return self


@dataclass
class EntailmentDirection:
    """Per pair (a_i, b_i): does a_i entail b_i rather than the reverse?

    Attributes:
        by_similarity: sim(b_i‖a_i) > sim(a_i‖b_i) — the entailed side fits inside the entailing one.
        by_variance: Σlog σ²(a_i) > Σlog σ²(b_i) — the entailing side is the broader Gaussian.
        sim_ba: sim(b_i‖a_i), the score of "a entails b".
        sim_ab: sim(a_i‖b_i), the score of "b entails a".
    """

    by_similarity: torch.Tensor
    by_variance: torch.Tensor
    sim_ba: torch.Tensor
    sim_ab: torch.Tensor
