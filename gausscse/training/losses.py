r"""Contrastive losses: GaussCSE (Yoda et al., EACL 2024, eq. 3), supervised SimCSE and the weighted extra terms, one
``nn.Module`` each, composed by [`GaussCSELoss`].

A batch holds premises s_i, entailments s_i⁺ and, where present, contradictions s_i⁻ (i = 1..N);
sim(a‖b) = 1 / (1 + KL(N_a‖N_b)) (``gausscse.model.gaussian``). GaussCSE, temperature τ ([`GaussCSEContrastiveLoss`])::

    L = (1/N) Σ_i −log [ e^{sim(s_i⁺‖s_i)/τ} / (V_E + V_C + V_R) ]
    V_E = Σ_j e^{sim(s_j⁺‖s_i)/τ}   V_C = Σ_j e^{sim(s_j⁻‖s_i)/τ}   V_R = Σ_j e^{sim(s_j‖s_i⁺)/τ}

(the mean, not the paper's sum). The variants ``ent``, ``ent+con``, ``ent+rev``, ``ent+con+rev`` keep those parts of
the denominator, less missing s_j⁻ and in-batch false negatives ([`denominator_masks`]). The extra terms, added times
their weight when > 0: [`SupervisedSimCSELoss`] (on μ), [`RetrievalTerm`] L_ret, [`KeepTerm`] L_keep. A new term is
one module here with its equation, one weight in [`GaussCSELoss`] and one flag in [`LossTermArguments`].
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, fields, replace

import torch
import torch.nn.functional as F
from torch import nn

from gausscse.model.gaussian import (
    GaussianEmbeddings,
    as_float32,
    check_reduction,
    search_score_matrix,
    similarity_matrix,
)

from .distributed import gather_with_grad

logger = logging.getLogger(__name__)

GAUSSCSE_VARIANTS = ("ent", "ent+con", "ent+rev", "ent+con+rev")
LOSS_NAMES = (*GAUSSCSE_VARIANTS, "simcse")


def check_loss_name(name: str) -> str:
    """``name`` if it is a known loss, else ``ValueError`` listing the valid ones."""
    if name not in LOSS_NAMES:
        raise ValueError(f"Unknown loss {name!r}; valid losses: {', '.join(LOSS_NAMES)}")
    return name


def check_temperature(temperature: float) -> float:
    """``temperature`` if it is positive, else ``ValueError``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    return temperature


def uses_contradictions(name: str) -> bool:
    """Whether the ``--loss`` takes the contradiction hypotheses (V_C, or SimCSE's hard negatives)."""
    return "con" in check_loss_name(name) or name == "simcse"


@dataclass
class NLIBatchEmbeddings:
    """One batch of NLI examples: s_i, s_i⁺, s_i⁻, each ``(N, d)`` (contradiction rows where ``contradiction_mask``
    ``(N,)`` is False are placeholders); ``text_ids`` ``(N, 3)``: ids of their normalized texts (``None``: no
    false-negative masking); ``teacher`` ``(2N + K, h)``: the frozen starting encoder's vectors of the premises,
    entailments and K present contradictions (the keep term's targets)."""

    premise: GaussianEmbeddings
    entailment: GaussianEmbeddings
    contradiction: GaussianEmbeddings
    contradiction_mask: torch.Tensor
    text_ids: torch.Tensor | None = None
    teacher: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.premise)

    def gather(self) -> tuple[NLIBatchEmbeddings, int]:
        """All processes' batches concatenated (this process's rows keep their graph; no teacher) and the offset of
        this process's rows; ``(self, 0)`` without ``torch.distributed``."""
        gaussians = (self.premise, self.entailment, self.contradiction)
        tensors = [tensor for item in gaussians for tensor in (item.mu, item.logvar)] + [self.contradiction_mask]
        gathered, offset = gather_with_grad(tensors + ([] if self.text_ids is None else [self.text_ids]))
        pairs = [GaussianEmbeddings(gathered[k], gathered[k + 1]) for k in (0, 2, 4)]
        text_ids = gathered[7] if self.text_ids is not None else None
        return NLIBatchEmbeddings(*pairs, gathered[6], text_ids), offset


@dataclass
class DenominatorMasks:
    """Boolean ``(N_rows, N_columns)`` masks of the kept terms (True = kept) of V_E, V_C, V_R and L_ret."""

    entailment: torch.Tensor
    contradiction: torch.Tensor
    reverse: torch.Tensor
    retrieval: torch.Tensor


def denominator_masks(
    row_ids: torch.Tensor | None, column_ids: torch.Tensor | None, contradiction_mask: torch.Tensor, row_offset: int = 0
) -> DenominatorMasks:
    """Which terms are true negatives of each row (the positive, column ``i + row_offset``, is always kept).

    ``row_ids`` ``(R, 3)`` / ``column_ids`` ``(C, 3)``: text ids of (premise, entailment, contradiction) of the rows
    and the (gathered) columns, ``None``: no text masking; ``contradiction_mask`` ``(C,)``. For row i, column j ≠ i:
    V_E drops s_j⁺ with the text of s_i or s_i⁺, or whose s_j has the text of s_i; V_C drops a missing s_j⁻ or one
    with the text of s_i or s_i⁺; V_R drops s_j with the text of s_i⁺; L_ret (row s_i⁺, column s_j) drops s_j with
    the text of s_i⁺ or s_i, or whose s_j⁺ has the text of s_i⁺.
    """
    num_columns = contradiction_mask.shape[0]
    num_rows = num_columns if row_ids is None else row_ids.shape[0]
    device = contradiction_mask.device
    positive = torch.zeros(num_rows, num_columns, dtype=torch.bool, device=device)
    positive[torch.arange(num_rows, device=device), torch.arange(num_rows, device=device) + row_offset] = True
    keep_contradiction = contradiction_mask[None, :].expand(num_rows, -1)
    if row_ids is None:
        full = torch.ones(num_rows, num_columns, dtype=torch.bool, device=device)
        return DenominatorMasks(full, keep_contradiction.clone(), full.clone(), full.clone())

    def same(row_role: int, column_role: int) -> torch.Tensor:
        return row_ids[:, row_role, None] == column_ids[None, :, column_role]

    premise, entailment, contradiction = 0, 1, 2
    entailment_clash = same(premise, entailment) | same(entailment, entailment) | same(premise, premise)
    contradiction_clash = same(premise, contradiction) | same(entailment, contradiction)
    retrieval_clash = same(entailment, premise) | same(premise, premise) | same(entailment, entailment)
    return DenominatorMasks(
        entailment=positive | ~entailment_clash,
        contradiction=keep_contradiction & ~contradiction_clash,
        reverse=~same(entailment, premise),
        retrieval=positive | ~retrieval_clash,
    )


Columns = tuple[NLIBatchEmbeddings, int, DenominatorMasks]


def scale_gradient(tensor: torch.Tensor, scale: float) -> torch.Tensor:
    """``tensor`` in the forward pass; its gradient times ``scale`` in the backward pass (0: detached)."""
    if scale == 1:
        return tensor
    detached = tensor.detach()
    return detached if scale == 0 else detached + scale * (tensor - detached)


def scale_mean_gradient(batch: NLIBatchEmbeddings, scale: float) -> NLIBatchEmbeddings:
    """``batch`` whose μ pass ``scale`` times their gradient back ([`scale_gradient`]); log σ² untouched."""
    sides = [
        GaussianEmbeddings(scale_gradient(side.mu, scale), side.logvar)
        for side in (batch.premise, batch.entailment, batch.contradiction)
    ]
    return replace(batch, premise=sides[0], entailment=sides[1], contradiction=sides[2])


def batch_columns(batch: NLIBatchEmbeddings, gather: bool) -> Columns:
    """The columns j (the batch, gathered across processes when ``gather``), this process's row offset among them and
    the keep-masks: computed once per loss call, shared by every block and term."""
    columns, offset = batch.gather() if gather else (batch, 0)
    return columns, offset, denominator_masks(batch.text_ids, columns.text_ids, columns.contradiction_mask, offset)


def masked_cross_entropy(logits: list[torch.Tensor], masks: list[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """Mean over rows of −log softmax[target] of the column-concatenated ``(R, C_k)`` blocks, masked entries left out
    (fp32; fp64 stays fp64). Each row must keep its target."""
    scores = as_float32(torch.cat(logits, dim=1)).masked_fill(~torch.cat(masks, dim=1), float("-inf"))
    return F.cross_entropy(scores, targets)


class GaussCSEContrastiveLoss(nn.Module):
    r"""The GaussCSE loss of eq. 3 (module docstring) in one of its ``variant`` s (``GAUSSCSE_VARIANTS``), in fp32 even
    under autocast. ``reduction``: the model's ``config.similarity_reduction`` (no default); ``gather``: the columns j
    span all processes' batches.

    Example::

        loss = GaussCSEContrastiveLoss("ent+con+rev", temperature=0.05, reduction=model.config.similarity_reduction)
        value = loss(NLIBatchEmbeddings(premise, entailment, contradiction, contradiction_mask))
    """

    def __init__(self, variant: str, temperature: float, reduction: str, *, gather: bool = True):
        super().__init__()
        if variant not in GAUSSCSE_VARIANTS:
            raise ValueError(f"Unknown GaussCSE variant {variant!r}; valid variants: {', '.join(GAUSSCSE_VARIANTS)}")
        self.variant = variant
        self.temperature = check_temperature(temperature)
        self.reduction = check_reduction(reduction)
        self.gather = gather

    def similarity_blocks(
        self, batch: NLIBatchEmbeddings, columns: Columns | None = None
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
        """The logit blocks [E, (C), (R)], their keep-masks and this process's row offset: E_ij = sim(s_j⁺‖s_i)/τ,
        C_ij = sim(s_j⁻‖s_i)/τ, R_ij = sim(s_j‖s_i⁺)/τ, rows this process's examples, columns the whole batch."""
        columns, offset, masks = columns or batch_columns(batch, self.gather)
        premises, positives = (side[offset : offset + len(batch)] for side in (columns.premise, columns.entailment))

        def block(left: GaussianEmbeddings, right: GaussianEmbeddings) -> torch.Tensor:
            # similarity_matrix(a, b)[j, i] = sim(a_j‖b_i): transposed, the rows are the anchors i
            return similarity_matrix(left.mu, left.logvar, right.mu, right.logvar, self.reduction).T / self.temperature

        logits, keep = [block(columns.entailment, premises)], [masks.entailment]
        if "con" in self.variant:
            logits.append(block(columns.contradiction, premises))
            keep.append(masks.contradiction)
        if "rev" in self.variant:
            logits.append(block(columns.premise, positives))
            keep.append(masks.reverse)
        return logits, keep, offset

    def forward(self, batch: NLIBatchEmbeddings, columns: Columns | None = None) -> torch.Tensor:
        """The loss of ``batch``; ``columns``: its [`batch_columns`] where the caller computed them already."""
        logits, keep, offset = self.similarity_blocks(batch, columns)
        return masked_cross_entropy(logits, keep, torch.arange(len(batch), device=logits[0].device) + offset)


class SupervisedSimCSELoss(nn.Module):
    r"""Supervised SimCSE (Gao et al., 2021) on the means μ, masked as V_E and V_C of [`GaussCSEContrastiveLoss`]::

        L_simcse = (1/N) Σ_i −log [ e^{cos(μ_i, μ_i⁺)/τ} / Σ_j (e^{cos(μ_i, μ_j⁺)/τ} + e^{cos(μ_i, μ_j⁻)/τ}) ]

    The baseline (``--loss simcse``) and GaussCSE's auxiliary term. ``keep_weight``: plus that weight times
    [`KeepTerm`].

    Example::

        value = SupervisedSimCSELoss(temperature=0.05)(NLIBatchEmbeddings(premise, entailment, contradiction, mask))
    """

    def __init__(self, temperature: float, gather: bool = True, keep_weight: float = 0.0):
        super().__init__()
        check_terms(LossTermArguments(keep_weight=keep_weight))
        self.temperature = check_temperature(temperature)
        self.gather = gather
        self.keep_weight = keep_weight

    def forward(self, batch: NLIBatchEmbeddings, columns: Columns | None = None) -> torch.Tensor:
        columns, offset, masks = columns or batch_columns(batch, self.gather)
        with torch.autocast(device_type=batch.premise.mu.device.type, enabled=False):
            anchors = F.normalize(as_float32(batch.premise.mu), dim=-1)
            positives = F.normalize(as_float32(columns.entailment.mu), dim=-1)
            negatives = F.normalize(as_float32(columns.contradiction.mu), dim=-1)
            logits = [anchors @ positives.T / self.temperature, anchors @ negatives.T / self.temperature]
            targets = torch.arange(len(batch), device=anchors.device) + offset
            loss = masked_cross_entropy(logits, [masks.entailment, masks.contradiction], targets)
        return loss + self.keep_weight * KeepTerm()(batch) if self.keep_weight > 0 else loss


class RetrievalTerm(nn.Module):
    r"""L_ret: each entailment hypothesis ranks its own premise among the batch's premises::

        L_ret = (1/N) Σ_j −log [ e^{sim(s_j⁺‖s_j)/τ} / Σ_i e^{sim(s_j⁺‖s_i)/τ} ]

    masked as [`denominator_masks`] says; with ``kl_weight`` λ_r, sim → cos − λ_r·KL/d (the search score).

    Example::

        value = RetrievalTerm(temperature=0.05, reduction="mean_kl", kl_weight=0.1)(batch)
    """

    def __init__(self, temperature: float, reduction: str, kl_weight: float | None = None, *, gather: bool = True):
        super().__init__()
        check_terms(LossTermArguments(retrieval_kl_weight=kl_weight))
        self.temperature = check_temperature(temperature)
        self.reduction = check_reduction(reduction)
        self.kl_weight = kl_weight
        self.gather = gather

    def forward(self, batch: NLIBatchEmbeddings, columns: Columns | None = None) -> torch.Tensor:
        columns, offset, masks = columns or batch_columns(batch, self.gather)
        hypotheses = columns.entailment[offset : offset + len(batch)]
        gaussians = (hypotheses.mu, hypotheses.logvar, columns.premise.mu, columns.premise.logvar)
        if self.kl_weight is None:
            logits = similarity_matrix(*gaussians, self.reduction)
        else:
            logits = search_score_matrix(*gaussians, self.kl_weight)
        targets = torch.arange(len(batch), device=logits.device) + offset
        return masked_cross_entropy([logits / self.temperature], [masks.retrieval], targets)


class KeepTerm(nn.Module):
    r"""L_keep ([`EmbeddingKeepLoss`]) of this process's sentences, in forward-pass order (premises, entailments, the
    present contradictions), against ``batch.teacher``: the frozen starting encoder's vectors of them.

    Example::

        batch.teacher = starting_encoder_vectors  # (2N + K, h)
        value = KeepTerm()(batch)
    """

    def forward(self, batch: NLIBatchEmbeddings, columns: Columns | None = None) -> torch.Tensor:
        if batch.teacher is None:
            raise ValueError("the keep term needs NLIBatchEmbeddings.teacher")
        mu = torch.cat([batch.premise.mu, batch.entailment.mu, batch.contradiction.mu[batch.contradiction_mask]])
        return EmbeddingKeepLoss()(mu, batch.teacher)


@dataclass
class LossTermArguments:
    """The extra loss terms' flags: each ``<name>_weight`` weighs the term of [`GaussCSELoss`] of that name; the other
    fields are parameters of a term. Every field fixes a run and must be a finite number >= 0 (or ``None``)."""

    retrieval_weight: float | None = field(
        default=None,
        metadata={
            "help": "Weight of the retrieval term: each entailment hypothesis ranks its own premise among the batch's "
            "(0 = off). Default: 1 for a model with the frozen μ path (results/KEEP.md), else 0 (the paper's loss).",
        },
    )
    retrieval_kl_weight: float | None = field(
        default=None, metadata={"help": "The retrieval term ranks by cos − λ_r·KL/d with this λ_r (default: by sim)."}
    )
    simcse_weight: float = field(
        default=0.0, metadata={"help": "Weight of the released code's auxiliary SimCSE term on μ (0 = off)."}
    )
    keep_weight: float = field(
        default=0.0,
        metadata={
            "help": "Weight of the keep term: μ's in-batch cosines distilled from the starting encoder (0 = off)."
        },
    )
    kl_mean_gradient: float = field(
        default=1.0,
        metadata={
            "help": "Scale of the GaussCSE term's gradient into μ (0 = stopped: μ learns from the other terms only, "
            "log σ² from all); for a model whose μ learns."
        },
    )


def check_terms(terms: LossTermArguments, prefix: str = "") -> None:
    """``ValueError`` naming ``prefix + field`` for a term value that is not a finite number >= 0."""
    for item in fields(LossTermArguments):
        value = getattr(terms, item.name)
        if value is not None and not 0 <= value < math.inf:
            raise ValueError(f"{prefix}{item.name} must be a finite number >= 0, got {value}")


class GaussCSELoss(nn.Module):
    r"""The training loss: [`GaussCSEContrastiveLoss`] of ``variant`` plus Σ weight × term over the extra terms::

        L = L_GaussCSE + w_ret·L_ret + w_simcse·L_simcse + w_keep·L_keep

    The weights are the keywords of [`LossTermArguments`]; an unset weight is 0, except ``retrieval_weight`` of a
    ``frozen_mean`` model (its μ path frozen: results/KEEP.md), which is 1. ``kl_mean_gradient`` scales the gradient
    L_GaussCSE sends into μ (0: μ learns from the other terms only). The batch's columns and masks are computed once
    and shared by every term.

    Example::

        loss = GaussCSELoss("ent+con+rev", 0.05, model.config.similarity_reduction, retrieval_weight=0.5)
        value = loss(NLIBatchEmbeddings(premise, entailment, contradiction, contradiction_mask))
    """

    def __init__(
        self,
        variant: str,
        temperature: float,
        reduction: str,
        *,
        gather: bool = True,
        frozen_mean: bool = False,
        retrieval_weight: float | None = None,
        retrieval_kl_weight: float | None = None,
        simcse_weight: float = 0.0,
        keep_weight: float = 0.0,
        kl_mean_gradient: float = 1.0,
    ):
        super().__init__()
        terms = LossTermArguments(retrieval_weight, retrieval_kl_weight, simcse_weight, keep_weight, kl_mean_gradient)
        check_terms(terms)
        self.kl_mean_gradient = kl_mean_gradient
        self.contrastive = GaussCSEContrastiveLoss(variant, temperature, reduction, gather=gather)
        self.terms = nn.ModuleDict(
            {
                "retrieval": RetrievalTerm(temperature, reduction, retrieval_kl_weight, gather=gather),
                "simcse": SupervisedSimCSELoss(temperature, gather=gather),
                "keep": KeepTerm(),
            }
        )
        default_retrieval = 1.0 if frozen_mean else 0.0
        self.weights = {
            "retrieval": default_retrieval if retrieval_weight is None else retrieval_weight,
            "simcse": simcse_weight,
            "keep": keep_weight,
        }
        self.gather = gather

    @property
    def retrieval_weight(self) -> float:
        return self.weights["retrieval"]

    def forward(self, batch: NLIBatchEmbeddings) -> torch.Tensor:
        columns = batch_columns(batch, self.gather)
        gathered, offset, masks = columns
        loss = self.contrastive(batch, (scale_mean_gradient(gathered, self.kl_mean_gradient), offset, masks))
        for name, weight in self.weights.items():
            if weight:
                loss = loss + weight * self.terms[name](batch, columns)
        return loss


class EmbeddingKeepLoss(nn.Module):
    r"""L_keep = (1/M²) Σ_{a,b} (cos(μ_a, μ_b) − cos(e_a, e_b))², in fp32: ``mu`` ``(M, d)`` keeps the in-batch
    cosines of ``teacher`` ``(M, h)`` (any h; no gradient reaches it). ``ValueError`` if the row counts differ."""

    def forward(self, mu: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        if mu.shape[0] != teacher.shape[0]:
            raise ValueError(f"mu and teacher must have one row per sentence, got {mu.shape[0]} and {teacher.shape[0]}")
        with torch.autocast(device_type=mu.device.type, enabled=False):
            student = F.normalize(as_float32(mu), dim=-1)
            target = F.normalize(as_float32(teacher.detach()), dim=-1)
            return F.mse_loss(student @ student.T, target @ target.T)


def build_loss(
    name: str, temperature: float, reduction: str, *, frozen_mean: bool = False, **terms: float | None
) -> nn.Module:
    """The loss of the command line's flags (the one place they map to modules): ``--loss`` a [`GaussCSELoss`]
    variant with the ``terms`` (``LossTermArguments`` keywords; ``frozen_mean``: the model's, for the retrieval
    default), or ``simcse``: [`SupervisedSimCSELoss`] (the keep term only)."""
    if check_loss_name(name) == "simcse":
        defaults = {item.name: item.default for item in fields(LossTermArguments)}
        ignored = [
            f"--{term} {value}"
            for term, value in terms.items()
            if value and value != defaults.get(term) and term != "keep_weight"
        ]
        if ignored:  # e.g. a config shared with the GaussCSE runs
            logger.warning("--loss simcse takes --keep_weight only of the loss terms; ignored: %s", ", ".join(ignored))
        return SupervisedSimCSELoss(temperature, keep_weight=terms.get("keep_weight") or 0.0)
    return GaussCSELoss(name, temperature, reduction, frozen_mean=frozen_mean, **terms)
