r"""Contrastive losses for GaussCSE (Yoda et al., EACL 2024, eq. 3) and the supervised SimCSE baseline.

Notation: a batch of NLI examples i = 1..N, each a premise s_i, an entailment hypothesis s_i⁺ and, when the
data has one, a contradiction hypothesis s_i⁻. sim(a‖b) = 1 / (1 + KL(N_a‖N_b)) (see ``gausscse.model.gaussian``).

GaussCSE (eq. 3), temperature τ::

    L = (1/N) Σ_i −log [ e^{sim(s_i⁺‖s_i)/τ} / (V_E + V_C + V_R) ]
    V_E = Σ_j e^{sim(s_j⁺‖s_i)/τ}      (entailment hypotheses against the premise; j = i is the positive)
    V_C = Σ_j e^{sim(s_j⁻‖s_i)/τ}      (contradiction hypotheses against the premise)
    V_R = Σ_j e^{sim(s_j‖s_i⁺)/τ}      (premises against the fixed positive: the reversed direction)

The paper sums over i; the mean is used here so the learning rate does not depend on the batch size.
The variants keep a subset of the denominator: ``ent`` (V_E), ``ent+con``, ``ent+rev``, ``ent+con+rev``.

An optional retrieval term (``retrieval_weight`` λ; not in the paper) ranks the premises for each entailment
hypothesis, as entailment search does (claim → the premises that entail it):

    L_ret = (1/N) Σ_j −log [ e^{sim(s_j⁺‖s_j)/τ} / Σ_i e^{sim(s_j⁺‖s_i)/τ} ]

With ``retrieval_kl_weight`` λ_r the term ranks by the search score instead of sim: s(s_j⁺, s_i) =
cos(μ_{s_j⁺}, μ_{s_i}) − λ_r·KL(s_j⁺‖s_i)/d (``gaussian.search_score_matrix``), what a model's search uses; with a
frozen μ the cosine is fixed and the KL learns what it misses.

Two refinements, both of them masks on the denominator (a masked term is −inf before the log-sum-exp):

* missing hard negatives: examples without s_j⁻ drop their column from V_C;
* in-batch false negatives: a column whose *text* equals s_i or s_i⁺ (other than the positive itself), and in
  V_E a column s_j⁺ whose premise s_j has the text of s_i (it is entailed by s_i too), is not a negative of row i.
"""

from __future__ import annotations

from dataclasses import dataclass

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

GAUSSCSE_VARIANTS = ("ent", "ent+con", "ent+rev", "ent+con+rev")
LOSS_NAMES = (*GAUSSCSE_VARIANTS, "simcse")


def check_loss_name(name: str) -> str:
    """Return ``name`` if it is a known loss, else raise ``ValueError`` listing the valid ones."""
    if name not in LOSS_NAMES:
        raise ValueError(f"Unknown loss {name!r}; valid losses: {', '.join(LOSS_NAMES)}")
    return name


@dataclass
class NLIBatchEmbeddings:
    """The embeddings of one batch of NLI examples, as the losses take them.

    Attributes:
        premise: s_i, ``(N, d)``.
        entailment: s_i⁺, ``(N, d)``.
        contradiction: s_i⁻, ``(N, d)``; rows where ``contradiction_mask`` is False are placeholders.
        contradiction_mask: ``(N,)`` bool, True where example i has a contradiction hypothesis.
        text_ids: ``(N, 3)`` int64 ids of the normalized texts of (s_i, s_i⁺, s_i⁻); equal texts have equal ids.
            ``None`` turns the false-negative masking off.
    """

    premise: GaussianEmbeddings
    entailment: GaussianEmbeddings
    contradiction: GaussianEmbeddings
    contradiction_mask: torch.Tensor
    text_ids: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.premise)

    def gather(self) -> tuple[NLIBatchEmbeddings, int]:
        """All processes' batches concatenated (this process's slice keeps its autograd graph) and the offset of
        this process's rows in it. Without ``torch.distributed`` it returns ``(self, 0)``."""
        tensors = [
            self.premise.mu,
            self.premise.logvar,
            self.entailment.mu,
            self.entailment.logvar,
            self.contradiction.mu,
            self.contradiction.logvar,
            self.contradiction_mask,
        ]
        if self.text_ids is not None:
            tensors.append(self.text_ids)
        gathered, offset = gather_with_grad(tensors)
        return (
            NLIBatchEmbeddings(
                premise=GaussianEmbeddings(gathered[0], gathered[1]),
                entailment=GaussianEmbeddings(gathered[2], gathered[3]),
                contradiction=GaussianEmbeddings(gathered[4], gathered[5]),
                contradiction_mask=gathered[6],
                text_ids=gathered[7] if self.text_ids is not None else None,
            ),
            offset,
        )


@dataclass
class DenominatorMasks:
    """Boolean ``(N_rows, N_columns)`` masks of the terms kept in V_E, V_C and V_R (True = kept)."""

    entailment: torch.Tensor
    contradiction: torch.Tensor
    reverse: torch.Tensor
    retrieval: torch.Tensor


def denominator_masks(
    row_ids: torch.Tensor | None,
    column_ids: torch.Tensor | None,
    contradiction_mask: torch.Tensor,
    row_offset: int = 0,
) -> DenominatorMasks:
    """Which terms of V_E, V_C, V_R are true negatives of each row (plus, in V_E, the positive itself).

    Args:
        row_ids: ``(R, 3)`` text ids (premise, entailment, contradiction) of the rows (anchors); ``None``: no
            text-based masking.
        column_ids: ``(C, 3)`` text ids of the columns (the whole, possibly gathered, batch).
        contradiction_mask: ``(C,)`` True where column j has a contradiction hypothesis.
        row_offset: column index of row 0 (rows are columns ``row_offset .. row_offset + R - 1``).

    Rules, for row i and column j ≠ i (the positive, V_E's column i, is always kept):

    * V_E drops s_j⁺ if its text is that of s_i or s_i⁺, or if s_j has the text of s_i (s_i entails s_j⁺);
    * V_C drops s_j⁻ if it is missing or has the text of s_i or s_i⁺;
    * V_R drops s_j if it has the text of s_i⁺ (sim(x‖x) is the largest possible score, not a negative);
    * the retrieval term (row: the hypothesis s_i⁺, column: the premise s_j) drops s_j if it has the text of s_i⁺ or
      of s_i, or if s_j⁺ has the text of s_i⁺ (s_j entails s_i⁺ too).
    """
    num_columns = contradiction_mask.shape[0]
    num_rows = num_columns if row_ids is None else row_ids.shape[0]
    device = contradiction_mask.device
    positive = torch.zeros(num_rows, num_columns, dtype=torch.bool, device=device)
    positive[torch.arange(num_rows, device=device), torch.arange(num_rows, device=device) + row_offset] = True
    keep_contradiction = contradiction_mask[None, :].expand(num_rows, -1)
    if row_ids is None:
        full = torch.ones(num_rows, num_columns, dtype=torch.bool, device=device)
        return DenominatorMasks(
            entailment=full, contradiction=keep_contradiction.clone(), reverse=full.clone(), retrieval=full.clone()
        )

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


def masked_cross_entropy(logits: list[torch.Tensor], masks: list[torch.Tensor], targets: torch.Tensor) -> torch.Tensor:
    """Mean over rows of −log softmax(logits)[target] with masked entries left out of the log-sum-exp.

    ``logits``/``masks``: blocks of shape ``(R, C_k)`` concatenated along columns; computed in fp32 (fp64 stays
    fp64). Each row must keep its target (then its log-sum-exp, the loss and the gradient stay finite).
    """
    scores = as_float32(torch.cat(logits, dim=1))
    keep = torch.cat(masks, dim=1)
    scores = scores.masked_fill(~keep, float("-inf"))
    return F.cross_entropy(scores, targets)


def _rows(embeddings: GaussianEmbeddings, offset: int, count: int) -> GaussianEmbeddings:
    return embeddings[offset : offset + count]


class SupervisedSimCSELoss(nn.Module):
    r"""Supervised SimCSE (Gao et al., 2021) on the means μ: the in-house baseline and GaussCSE's auxiliary term.

    L = (1/N) Σ_i −log [ e^{cos(μ_i, μ_i⁺)/τ} / Σ_j (e^{cos(μ_i, μ_j⁺)/τ} + e^{cos(μ_i, μ_j⁻)/τ}) ]

    Missing hard negatives and in-batch false negatives are masked as in [`GaussCSELoss`] (V_E and V_C rules).

    Args:
        temperature: τ (0.05 in SimCSE and GaussCSE).
        gather: under ``torch.distributed``, take the negatives from all processes' batches.

    Example:

    ```python
    >>> loss_fn = SupervisedSimCSELoss(temperature=0.05)
    >>> loss = loss_fn(batch)  # batch: NLIBatchEmbeddings
    ```
    """

    def __init__(self, temperature: float, gather: bool = True):
        super().__init__()
        self.temperature = check_temperature(temperature)
        self.gather = gather

    def forward(self, batch: NLIBatchEmbeddings) -> torch.Tensor:
        columns, offset = batch.gather() if self.gather else (batch, 0)
        rows = len(batch)
        masks = denominator_masks(batch.text_ids, columns.text_ids, columns.contradiction_mask, offset)
        with torch.autocast(device_type=batch.premise.mu.device.type, enabled=False):
            anchors = F.normalize(as_float32(batch.premise.mu), dim=-1)
            positives = F.normalize(as_float32(columns.entailment.mu), dim=-1)
            negatives = F.normalize(as_float32(columns.contradiction.mu), dim=-1)
            logits = [anchors @ positives.T / self.temperature, anchors @ negatives.T / self.temperature]
            targets = torch.arange(rows, device=anchors.device) + offset
            return masked_cross_entropy(logits, [masks.entailment, masks.contradiction], targets)


class GaussCSELoss(nn.Module):
    r"""The GaussCSE contrastive loss, eq. 3 of Yoda et al. (EACL 2024).

    L = (1/N) Σ_i −log [ e^{sim(s_i⁺‖s_i)/τ} / (V_E + V_C + V_R) ] with
    V_E = Σ_j e^{sim(s_j⁺‖s_i)/τ}, V_C = Σ_j e^{sim(s_j⁻‖s_i)/τ}, V_R = Σ_j e^{sim(s_j‖s_i⁺)/τ}.

    ``variant`` picks the denominator: ``ent`` (V_E), ``ent+con`` (V_E + V_C), ``ent+rev`` (V_E + V_R) or
    ``ent+con+rev`` (all three). Computed in fp32 even under autocast. Under ``torch.distributed`` (and
    ``gather=True``) the columns j span all processes' batches, as in SimCSE; the gradient is exact (the backward
    of the gather sums every process's contribution).

    Args:
        variant: one of ``GAUSSCSE_VARIANTS``.
        temperature: τ (the paper: 0.05, ``--temperature``'s default).
        reduction: ``"sum"`` (eq. 2: 1/(1 + KL)), ``"mean_kl"`` (1/(1 + KL/d)) or ``"mean_dim"`` (the released
            code: mean over dimensions of 1/(1 + KL_k)). No default: pass the model's,
            ``model.config.similarity_reduction``, so the loss trains the similarity the model is scored with.
        simcse_weight: weight λ of the released code's optional auxiliary term λ·SupervisedSimCSE(μ); 0 turns it off.
        retrieval_weight: weight λ of the retrieval term L_ret (module docstring): each entailment hypothesis ranks
            its own premise above the batch's other premises; 0 turns it off.
        retrieval_kl_weight: λ_r: the retrieval term ranks by the search score cos − λ_r·KL/d (module docstring)
            instead of the similarity; ``None``: by the similarity.
        gather: gather the negatives across processes under ``torch.distributed``.

    Inputs: an [`NLIBatchEmbeddings`]. Output: the scalar loss.

    Example:

    ```python
    >>> loss_fn = GaussCSELoss("ent+con+rev", temperature=0.05, reduction=model.config.similarity_reduction)
    >>> batch = NLIBatchEmbeddings(premise, entailment, contradiction, contradiction_mask, text_ids)
    >>> loss = loss_fn(batch)
    ```
    """

    def __init__(
        self,
        variant: str,
        temperature: float,
        reduction: str,
        simcse_weight: float = 0.0,
        gather: bool = True,
        retrieval_weight: float = 0.0,
        retrieval_kl_weight: float | None = None,
    ):
        super().__init__()
        if variant not in GAUSSCSE_VARIANTS:
            raise ValueError(
                f"Unknown GaussCSE loss variant {variant!r}; valid variants: {', '.join(GAUSSCSE_VARIANTS)}"
            )
        if simcse_weight < 0:
            raise ValueError(f"simcse_weight must be non-negative, got {simcse_weight}")
        if retrieval_weight < 0:
            raise ValueError(f"retrieval_weight must be non-negative, got {retrieval_weight}")
        if retrieval_kl_weight is not None and not 0 <= retrieval_kl_weight < float("inf"):
            raise ValueError(f"retrieval_kl_weight must be a finite number >= 0, got {retrieval_kl_weight}")
        self.retrieval_weight = retrieval_weight
        self.retrieval_kl_weight = retrieval_kl_weight
        self.variant = variant
        self.temperature = check_temperature(temperature)
        self.reduction = check_reduction(reduction)
        self.simcse_weight = simcse_weight
        self.gather = gather
        self.simcse = SupervisedSimCSELoss(temperature, gather=gather) if simcse_weight > 0 else None

    def columns(self, batch: NLIBatchEmbeddings) -> tuple[NLIBatchEmbeddings, int, DenominatorMasks]:
        """The columns j (the whole batch, gathered across processes when ``gather``), the offset of this process's
        rows among them and the keep-masks: computed once per loss call, shared by every block and term."""
        columns, offset = batch.gather() if self.gather else (batch, 0)
        return columns, offset, denominator_masks(batch.text_ids, columns.text_ids, columns.contradiction_mask, offset)

    def similarity_blocks(
        self, batch: NLIBatchEmbeddings, columns: tuple[NLIBatchEmbeddings, int, DenominatorMasks] | None = None
    ) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
        """The logit blocks [E, (C), (R)], their keep-masks and the column offset of this process's rows.

        E_ij = sim(s_j⁺‖s_i)/τ, C_ij = sim(s_j⁻‖s_i)/τ, R_ij = sim(s_j‖s_i⁺)/τ; rows i are this process's
        examples, columns j the whole (gathered) batch. ``columns``: :meth:`columns` of ``batch``, if computed.
        """
        columns, offset, masks = columns or self.columns(batch)
        premises = _rows(columns.premise, offset, len(batch))
        positives = _rows(columns.entailment, offset, len(batch))

        def block(left: GaussianEmbeddings, right: GaussianEmbeddings) -> torch.Tensor:
            # similarity_matrix(a, b)[j, i] = sim(a_j‖b_i): transpose so rows are the anchors i.
            return similarity_matrix(left.mu, left.logvar, right.mu, right.logvar, self.reduction).T / self.temperature

        logits, keep = [block(columns.entailment, premises)], [masks.entailment]
        if "con" in self.variant:
            logits.append(block(columns.contradiction, premises))
            keep.append(masks.contradiction)
        if "rev" in self.variant:
            logits.append(block(columns.premise, positives))
            keep.append(masks.reverse)
        return logits, keep, offset

    def retrieval_loss(
        self, batch: NLIBatchEmbeddings, columns: tuple[NLIBatchEmbeddings, int, DenominatorMasks] | None = None
    ) -> torch.Tensor:
        """L_ret: rows are this process's entailment hypotheses s_j⁺, columns the whole batch's premises s_i,
        logits sim(s_j⁺‖s_i)/τ, the target the hypothesis's own premise; false negatives masked. (Its own block: E
        has the premises as rows; across processes the transpose would hold only this process's hypotheses.)"""
        columns, offset, masks = columns or self.columns(batch)
        hypotheses = _rows(columns.entailment, offset, len(batch))
        gaussians = (hypotheses.mu, hypotheses.logvar, columns.premise.mu, columns.premise.logvar)
        if self.retrieval_kl_weight is None:
            logits = similarity_matrix(*gaussians, self.reduction)
        else:
            logits = search_score_matrix(*gaussians, self.retrieval_kl_weight)
        targets = torch.arange(len(batch), device=logits.device) + offset
        return masked_cross_entropy([logits / self.temperature], [masks.retrieval], targets)

    def forward(self, batch: NLIBatchEmbeddings) -> torch.Tensor:
        columns = self.columns(batch)
        logits, keep, offset = self.similarity_blocks(batch, columns)
        targets = torch.arange(len(batch), device=logits[0].device) + offset
        loss = masked_cross_entropy(logits, keep, targets)
        if self.retrieval_weight > 0:
            loss = loss + self.retrieval_weight * self.retrieval_loss(batch, columns)
        if self.simcse is not None:
            loss = loss + self.simcse_weight * self.simcse(batch)
        return loss


class EmbeddingKeepLoss(nn.Module):
    r"""The keep term: μ keeps the geometry of the encoder training started from.

    L_keep = (1/M²) Σ_{a,b} (cos(μ_a, μ_b) − cos(e_a, e_b))²

    over the M sentences of a batch (premises and both hypotheses), e_a being the sentence's pooled vector from a
    frozen copy of the starting encoder: the in-batch cosine similarities of the teacher are distilled into μ. It is
    added to the GaussCSE loss with ``--keep_weight``. Computed in fp32.

    Inputs: ``mu`` ``(M, d)`` (with gradient) and ``teacher`` ``(M, h)`` (any h; no gradient needed). Output: the
    scalar loss (0 when μ's cosine matrix equals the teacher's).

    Example:

    ```python
    >>> keep = EmbeddingKeepLoss()
    >>> loss = gausscse_loss + 0.5 * keep(outputs.mu, teacher_vectors)
    ```
    """

    def forward(self, mu: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
        if mu.shape[0] != teacher.shape[0]:
            raise ValueError(f"mu and teacher must have one row per sentence, got {mu.shape[0]} and {teacher.shape[0]}")
        with torch.autocast(device_type=mu.device.type, enabled=False):
            student = F.normalize(as_float32(mu), dim=-1)
            target = F.normalize(as_float32(teacher.detach()), dim=-1)
            return F.mse_loss(student @ student.T, target @ target.T)


def uses_contradictions(name: str) -> bool:
    """Whether the ``--loss`` takes the contradiction hypotheses (V_C, or SimCSE's hard negatives)."""
    return "con" in check_loss_name(name) or name == "simcse"


def check_temperature(temperature: float) -> float:
    """``temperature`` if it is a positive number (τ divides every similarity), else ``ValueError``."""
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    return temperature


def build_loss(
    name: str,
    temperature: float,
    reduction: str,
    simcse_weight: float = 0.0,
    retrieval_weight: float = 0.0,
    retrieval_kl_weight: float | None = None,
) -> nn.Module:
    """The loss module for a ``--loss`` name: a GaussCSE variant or ``simcse`` (the supervised SimCSE baseline);
    ``reduction``: the model's ``config.similarity_reduction``."""
    if check_loss_name(name) == "simcse":
        return SupervisedSimCSELoss(temperature)
    return GaussCSELoss(
        name,
        temperature,
        reduction,
        simcse_weight,
        retrieval_weight=retrieval_weight,
        retrieval_kl_weight=retrieval_kl_weight,
    )


__all__ = [
    "GAUSSCSE_VARIANTS",
    "LOSS_NAMES",
    "DenominatorMasks",
    "EmbeddingKeepLoss",
    "GaussCSELoss",
    "NLIBatchEmbeddings",
    "SupervisedSimCSELoss",
    "build_loss",
    "check_loss_name",
    "check_temperature",
    "denominator_masks",
    "masked_cross_entropy",
    "uses_contradictions",
]
