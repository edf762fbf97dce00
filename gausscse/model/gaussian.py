"""Closed-form math for diagonal Gaussians N(μ, diag σ²) stored as ``(mu, logvar)``, in float32 (float64 for float64
input) even under autocast. sim(a‖b) = 1 / (1 + KL(a‖b)) is asymmetric: an entailed hypothesis scores sim(hyp‖pre)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.functional import normalize

REDUCTIONS = ("sum", "mean_kl", "mean_dim")
# sim = 1 / (1 + KL / scale): decreasing in the total KL, so they rank alike and search by inner product is exact
KL_REDUCTIONS = ("sum", "mean_kl")
SIMILARITY_FORMULAS = {
    "sum": "1 / (1 + KL({a}‖{b}))",
    "mean_kl": "1 / (1 + KL({a}‖{b}) / d)",
    "mean_dim": "mean_k 1 / (1 + KL_k({a}‖{b}))",
}
# |log σ²| above this is refused: the KL's variance ratios (up to e^60) stay inside float32's range (e^88)
LOGVAR_BOUND = 30.0
DEFAULT_CHUNK_ELEMENTS = 1 << 24  # above this many elements an N×M×d intermediate is split into row chunks
# search direction → kl_feature_map sides of (query, stored item): "entailing" scores sim(q‖x), "entailed_by" sim(x‖q)
SEARCH_DIRECTIONS = {"entailing": ("left", "right"), "entailed_by": ("right", "left")}


def check_reduction(reduction: str) -> str:
    """Return ``reduction`` if it is one of ``REDUCTIONS``, else raise ``ValueError``."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"similarity_reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return reduction


def similarity_formula(reduction: str, a: str = "a", b: str = "b") -> str:
    """sim(a‖b) of ``reduction`` written with the side names ``a``, ``b``, e.g. ``1 / (1 + KL(a‖b) / d)``."""
    return SIMILARITY_FORMULAS[check_reduction(reduction)].format(a=a, b=b)


def kl_scale(reduction: str, dim: int) -> int:
    """c in sim = 1 / (1 + KL / c): 1 for ``"sum"``, d for ``"mean_kl"``; ``ValueError`` for ``"mean_dim"``."""
    if check_reduction(reduction) not in KL_REDUCTIONS:
        raise ValueError(f"similarity_reduction {reduction!r} is not a function of the total KL ({KL_REDUCTIONS})")
    if dim < 1:
        raise ValueError(f"dim must be a positive integer, got {dim}")
    return 1 if reduction == "sum" else dim


def as_float32(tensor: Tensor) -> Tensor:
    """Upcast half precision to float32 (float64 stays float64)."""
    return tensor if tensor.dtype == torch.float64 else tensor.float()


def kl_per_dim(mu_a: Tensor, logvar_a: Tensor, mu_b: Tensor, logvar_b: Tensor) -> Tensor:
    """Per-dimension KL of paired (broadcasting) Gaussians, ``(..., d)``:
    KL_k(a‖b) = ½ [ logσ_b,k² − logσ_a,k² + σ_a,k²/σ_b,k² + (μ_a,k − μ_b,k)²/σ_b,k² − 1 ]."""
    with torch.autocast(device_type=mu_a.device.type, enabled=False):
        mu_a, logvar_a, mu_b, logvar_b = map(as_float32, (mu_a, logvar_a, mu_b, logvar_b))
        inv_var_b = torch.exp(-logvar_b)
        if torch.is_grad_enabled() and any(tensor.requires_grad for tensor in (mu_a, logvar_a, mu_b, logvar_b)):
            return 0.5 * (logvar_b - logvar_a + (torch.exp(logvar_a) + (mu_a - mu_b) ** 2) * inv_var_b - 1.0)
        # no gradient: the same expression in place, in one buffer (a third of the memory traffic)
        shape = torch.broadcast_shapes(mu_a.shape, logvar_a.shape, mu_b.shape, logvar_b.shape)
        work = (mu_a - mu_b).broadcast_to(shape).contiguous()
        work.square_().add_(torch.exp(logvar_a)).mul_(inv_var_b)
        return work.add_(logvar_b).sub_(logvar_a).sub_(1.0).mul_(0.5)


def kl_divergence(mu_a: Tensor, logvar_a: Tensor, mu_b: Tensor, logvar_b: Tensor) -> Tensor:
    """Full KL(N_a ‖ N_b) = Σ_k KL_k(a‖b) of paired Gaussians, shape ``(...)``."""
    return kl_per_dim(mu_a, logvar_a, mu_b, logvar_b).sum(dim=-1)


def similarity_from_kl(kl: Tensor, scale: float = 1.0) -> Tensor:
    """sim = 1 / (1 + KL / scale) ∈ (0, 1]; ``scale``: [`kl_scale`]."""
    return 1.0 / (1.0 + kl / scale)


def similarity(mu_a: Tensor, logvar_a: Tensor, mu_b: Tensor, logvar_b: Tensor, reduction: str) -> Tensor:
    """Row-wise asymmetric sim(a_i‖b_i), shape ``(...)``, differentiable, by ``reduction`` (``SIMILARITY_FORMULAS``)."""
    per_dim = kl_per_dim(mu_a, logvar_a, mu_b, logvar_b)
    if check_reduction(reduction) == "mean_dim":
        return similarity_from_kl(per_dim).mean(dim=-1)
    return similarity_from_kl(per_dim.sum(dim=-1), kl_scale(reduction, per_dim.shape[-1]))


def paired_similarity(mu_a: Tensor, logvar_a: Tensor, mu_b: Tensor, logvar_b: Tensor, reduction: str) -> Tensor:
    """Row-wise sim(a_i‖b_i) for ranking, equal to [`similarity_matrix`]: ``KL_REDUCTIONS`` sum the KL in float64 (a
    float32 sum can order close candidates differently on different CPUs); ``mean_dim`` as [`similarity`]."""
    if check_reduction(reduction) not in KL_REDUCTIONS:
        return similarity(mu_a, logvar_a, mu_b, logvar_b, reduction)
    with torch.autocast(device_type=mu_a.device.type, enabled=False):
        kl = kl_divergence(mu_a.double(), logvar_a.double(), mu_b.double(), logvar_b.double()).clamp_min(0.0)
        return similarity_from_kl(kl.to(as_float32(mu_a).dtype), kl_scale(reduction, mu_a.shape[-1]))


def kl_feature_map(mu: Tensor, logvar: Tensor, side: str) -> Tensor:
    """Float64 vectors of 2d + 2 dimensions whose inner products are KL divergences, KL(a‖b) = ⟨A(a), B(b)⟩:

        A(a) = ½ [ σ_a² + μ_a²,  −2 μ_a,  1,  −Σ_k logσ_a,k² − d ]                 (``side="left"``)
        B(b) = [ 1/σ_b²,  μ_b/σ_b²,  Σ_k logσ_b,k² + Σ_k μ_b,k²/σ_b,k²,  1 ]       (``side="right"``)

    Float64: the expanded square cancels in float32 at small variances. ``(N, d)`` → ``(N, 2d + 2)``.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side must be one of ('left', 'right'), got {side!r}")
    mu, logvar = mu.double(), logvar.double()
    ones = torch.ones_like(logvar[..., :1])
    if side == "left":
        constant = -logvar.sum(dim=-1, keepdim=True) - mu.shape[-1]
        return 0.5 * torch.cat([torch.exp(logvar) + mu**2, -2.0 * mu, ones, constant], dim=-1)
    inverse_variance = torch.exp(-logvar)
    constant = logvar.sum(dim=-1, keepdim=True) + (mu**2 * inverse_variance).sum(dim=-1, keepdim=True)
    return torch.cat([inverse_variance, mu * inverse_variance, constant, ones], dim=-1)


def kl_divergence_matrix(mu_a: Tensor, logvar_a: Tensor, mu_b: Tensor, logvar_b: Tensor) -> Tensor:
    """All-pairs KL(a_i‖b_j) ``(N, M)``: one float64 product of [`kl_feature_map`]s, float32 (float64 in: float64)."""
    with torch.autocast(device_type=mu_a.device.type, enabled=False):
        kl = kl_feature_map(mu_a, logvar_a, "left") @ kl_feature_map(mu_b, logvar_b, "right").T
        return kl.clamp_min(0.0).to(as_float32(mu_a).dtype)  # rounding can dip below zero when a ≈ b


def similarity_matrix(
    mu_a: Tensor,
    logvar_a: Tensor,
    mu_b: Tensor,
    logvar_b: Tensor,
    reduction: str,
    chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
) -> Tensor:
    """All-pairs S_ij = sim(a_i‖b_j), ``(N, M)``; ``mean_dim`` in row chunks of ≤ ``chunk_elements``."""
    if check_reduction(reduction) in KL_REDUCTIONS:
        scale = kl_scale(reduction, mu_a.shape[-1])
        return similarity_from_kl(kl_divergence_matrix(mu_a, logvar_a, mu_b, logvar_b), scale)
    rows = max(1, chunk_elements // max(1, mu_b.shape[0] * mu_b.shape[-1]))
    chunks = [
        similarity(mu_a[i : i + rows, None], logvar_a[i : i + rows, None], mu_b[None], logvar_b[None], "mean_dim")
        for i in range(0, mu_a.shape[0], rows)
    ]
    if not chunks:
        return mu_a.new_zeros((0, mu_b.shape[0]), dtype=as_float32(mu_a).dtype)
    return torch.cat(chunks, dim=0)


def cosine_matrix(mu_a: Tensor, mu_b: Tensor) -> Tensor:
    """All-pairs cos(μ_{a_i}, μ_{b_j}), shape ``(N, M)``, float32 (float64 for float64 inputs)."""
    return normalize(as_float32(mu_a), dim=-1) @ normalize(as_float32(mu_b), dim=-1).T


def search_score_from(cosine: Tensor, kl: Tensor, kl_weight: float, dim: int) -> Tensor:
    """The search score cos − λ · KL / d of the same pairs (λ = ``kl_weight`` ≥ 0)."""
    if not 0 <= kl_weight < float("inf"):
        raise ValueError(f"kl_weight must be a number >= 0, got {kl_weight}")
    return cosine if kl_weight == 0 else cosine - kl_weight * kl / dim


def entailment_score_from(similarity: Tensor, cosine: Tensor, cosine_weight: float | None) -> Tensor:
    """The entailment score 1 / (1/sim + α·(1 − cos)) of the same pairs, in [0, 1]: the model's similarity sim(hyp‖pre)
    with α·(1 − cos(μ_hyp, μ_pre)) added to its distance 1/sim − 1 (KL/d for ``mean_kl``, so that it ranks as the search
    score cos − KL/(α·d)); α = ``cosine_weight`` ≥ 0, ``None`` or 0: sim(hyp‖pre) itself."""
    if not cosine_weight:
        return similarity
    if not 0 < cosine_weight < float("inf"):
        raise ValueError(f"cosine_weight must be a finite number >= 0, got {cosine_weight}")
    return 1.0 / (1.0 / similarity + cosine_weight * (1.0 - cosine))


def paired_entailment_score(
    mu_hyp: Tensor, logvar_hyp: Tensor, mu_pre: Tensor, logvar_pre: Tensor, reduction: str, cosine_weight: float | None
) -> Tensor:
    """Row-wise [`entailment_score_from`] that pre_i entails hyp_i (float32; float64 in: float64)."""
    similarity = paired_similarity(mu_hyp, logvar_hyp, mu_pre, logvar_pre, reduction)
    if not cosine_weight:
        return similarity
    with torch.autocast(device_type=mu_hyp.device.type, enabled=False):
        cosine = (normalize(as_float32(mu_hyp), dim=-1) * normalize(as_float32(mu_pre), dim=-1)).sum(dim=-1)
        return entailment_score_from(similarity, cosine.to(similarity.dtype), cosine_weight)


def search_score_matrix(mu_a: Tensor, logvar_a: Tensor, mu_b: Tensor, logvar_b: Tensor, kl_weight: float) -> Tensor:
    """All-pairs S_ij = cos(μ_{a_i}, μ_{b_j}) − λ · KL(a_i‖b_j) / d ``(N, M)``, float32 (float64 in: float64)."""
    with torch.autocast(device_type=mu_a.device.type, enabled=False):
        kl = kl_divergence_matrix(mu_a, logvar_a, mu_b, logvar_b) if kl_weight else None
        return search_score_from(cosine_matrix(mu_a, mu_b), kl, kl_weight, mu_a.shape[-1])


def search_map_width(dim: int, kl_weight: float | None) -> int:
    """The width of [`query_map`] / [`stored_map`] vectors: 2d + 2 (the KL maps), 3d + 2 with the search score."""
    return 2 * dim + 2 if kl_weight is None else 3 * dim + 2


def query_map(mu: Tensor, logvar: Tensor, direction: str, kl_weight: float | None = None) -> Tensor:
    """A query's float64 search vector, ⟨query_map, stored_map⟩ being the score: −A(q) (``"entailing"``: −KL(q‖x))
    or −B(q) (``"entailed_by"``: −KL(x‖q)) of [`kl_feature_map`]; with ``kl_weight=λ`` ``[μ_q/‖μ_q‖, −(λ/d) A(q)]``."""
    kl_map = -kl_feature_map(mu, logvar, SEARCH_DIRECTIONS[direction][0])
    if kl_weight is None:
        return kl_map
    return torch.cat([normalize(mu.double(), dim=-1), (kl_weight / mu.shape[-1]) * kl_map], dim=-1)


def stored_map(mu: Tensor, logvar: Tensor, direction: str, kl_weight: float | None = None) -> Tensor:
    """An item's float64 indexed vector: B(x) (``"entailing"``) or A(x), after ``[μ_x/‖μ_x‖]`` with ``kl_weight``."""
    kl_map = kl_feature_map(mu, logvar, SEARCH_DIRECTIONS[direction][1])
    return kl_map if kl_weight is None else torch.cat([normalize(mu.double(), dim=-1), kl_map], dim=-1)


def paired_search_score(
    mu_q: Tensor, logvar_q: Tensor, mu_x: Tensor, logvar_x: Tensor, direction: str, kl_weight: float
) -> Tensor:
    """Row-wise cos(μ_q, μ_x) − λ · KL / d, KL(q‖x) (``"entailing"``) or KL(x‖q), float32 (float64 in: float64)."""
    with torch.autocast(device_type=mu_q.device.type, enabled=False):
        pairs = (mu_q, logvar_q, mu_x, logvar_x) if direction == "entailing" else (mu_x, logvar_x, mu_q, logvar_q)
        kl = kl_divergence(*(tensor.double() for tensor in pairs)).clamp_min(0.0)
        cosine = (normalize(mu_q.double(), dim=-1) * normalize(mu_x.double(), dim=-1)).sum(dim=-1)
        return search_score_from(cosine, kl, kl_weight, mu_q.shape[-1]).to(as_float32(mu_q).dtype)


@dataclass
class GaussianEmbeddings:
    """A batch of diagonal Gaussians: ``mu``, ``logvar`` (log σ²), ``(N, d)`` or ``(d,)``; arrays become tensors."""

    mu: Tensor
    logvar: Tensor

    def __post_init__(self) -> None:
        for name in ("mu", "logvar"):
            value = getattr(self, name)
            if not isinstance(value, Tensor):
                try:
                    value = torch.as_tensor(value, dtype=torch.float32)
                except (TypeError, ValueError, RuntimeError) as error:
                    raise TypeError(
                        f"{name} must be a tensor or an array of numbers, got {type(value).__name__}"
                    ) from error
            setattr(self, name, value if value.is_floating_point() else value.float())
        if self.mu.shape != self.logvar.shape:
            raise ValueError(
                f"mu and logvar must have the same shape, got {tuple(self.mu.shape)} and {tuple(self.logvar.shape)}"
            )
        if self.mu.ndim not in (1, 2):
            raise ValueError(f"mu and logvar must be (d,) or (N, d), got shape {tuple(self.mu.shape)}")

    @property
    def var(self) -> Tensor:  # σ²
        return torch.exp(self.logvar)

    @property
    def std(self) -> Tensor:  # σ
        return torch.exp(0.5 * self.logvar)

    @property
    def generality(self) -> Tensor:
        """Σ_k log σ_k²: larger on the entailing side (premise) after training."""
        return self.logvar.sum(dim=-1)

    @property
    def dim(self) -> int:
        return self.mu.shape[-1]

    def __len__(self) -> int:
        return self.mu.shape[0] if self.mu.ndim > 1 else 1

    def __getitem__(self, index) -> GaussianEmbeddings:
        return GaussianEmbeddings(self.mu[index], self.logvar[index])

    def to(self, *args, **kwargs) -> GaussianEmbeddings:
        return GaussianEmbeddings(self.mu.to(*args, **kwargs), self.logvar.to(*args, **kwargs))

    def check(self, argument: str) -> GaussianEmbeddings:
        """Return self; ``ValueError`` naming ``argument`` and the row if NaN/inf or |log σ²| > ``LOGVAR_BOUND``."""
        for name, tensor in (("mu", self.mu), ("logvar", self.logvar)):
            bad_rows = ~torch.isfinite(tensor if tensor.ndim > 1 else tensor[None]).all(dim=-1)
            if bool(bad_rows.any()):
                row = f"[{int(bad_rows.nonzero()[0, 0])}]" if tensor.ndim > 1 else ""
                raise ValueError(f"{argument}.{name}{row} holds NaN or inf values")
        if self.logvar.numel() and float(self.logvar.abs().max()) > LOGVAR_BOUND:
            biggest = float(self.logvar.abs().max())
            raise ValueError(f"{argument}.logvar holds values beyond ±{LOGVAR_BOUND:g} (max |log σ²| = {biggest:g})")
        return self


@dataclass
class EntailmentDirection:
    """Per pair, does a_i entail b_i? ``by_similarity``: sim(b_i‖a_i) > sim(a_i‖b_i) (``sim_ba``, ``sim_ab``);
    ``by_variance``: Σlog σ²(a_i) > Σlog σ²(b_i)."""

    by_similarity: Tensor
    by_variance: Tensor
    sim_ba: Tensor
    sim_ab: Tensor


def entailment_direction(a: GaussianEmbeddings, b: GaussianEmbeddings, reduction: str) -> EntailmentDirection:
    """Per pair, both rules of the paper (§3.2) for "a_i entails b_i", by the [`paired_similarity`] of ``reduction``."""
    sim_ba = paired_similarity(b.mu, b.logvar, a.mu, a.logvar, reduction)
    sim_ab = paired_similarity(a.mu, a.logvar, b.mu, b.logvar, reduction)
    return EntailmentDirection(sim_ba > sim_ab, a.generality > b.generality, sim_ba, sim_ab)
