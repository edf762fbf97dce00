"""A differentiable, exact all-gather of a batch, so contrastive negatives span all processes: its backward sums every
process's gradient for a row, so with DDP averaging the update equals one process's on the whole batch."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist


def _all_gather_padded(tensor: torch.Tensor, sizes: list[int]) -> torch.Tensor:
    """Concatenation over processes of ``tensor`` (``sizes[r]`` rows on rank r), without autograd."""
    if tensor.dtype == torch.bool:  # gloo has no bool collectives
        return _all_gather_padded(tensor.to(torch.uint8), sizes).bool()
    padded = tensor.new_zeros((max(sizes), *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    buffers = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(buffers, padded.contiguous())
    return torch.cat([buffer[:size] for buffer, size in zip(buffers, sizes, strict=True)])


class _GatherRows(torch.autograd.Function):
    """All-gather along dim 0 whose backward all-reduces (sums) the gradient and returns this rank's slice."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, sizes: list[int]) -> torch.Tensor:
        ctx.sizes = sizes
        ctx.start = sum(sizes[: dist.get_rank()])
        return _all_gather_padded(tensor, sizes)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, op=dist.ReduceOp.SUM)
        return grad[ctx.start : ctx.start + ctx.sizes[dist.get_rank()]], None


def gather_with_grad(tensors: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], int]:
    """Each tensor (same number of rows) concatenated over all processes along dim 0, and this process's row offset;
    floating tensors stay differentiable; local batches may differ in size. Without a process group of more than one
    process: the identity, offset 0."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return list(tensors), 0
    local_rows = torch.tensor([tensors[0].shape[0]], device=tensors[0].device)
    all_rows = [torch.zeros_like(local_rows) for _ in range(dist.get_world_size())]
    dist.all_gather(all_rows, local_rows)
    sizes = [int(rows) for rows in all_rows]
    gathered = [
        _GatherRows.apply(tensor, sizes) if tensor.is_floating_point() else _all_gather_padded(tensor, sizes)
        for tensor in tensors
    ]
    return gathered, sum(sizes[: dist.get_rank()])
