"""Where encode runs: the model's device, or [`EncodePool`] workers (``spawn``: run under ``__main__``)."""

from __future__ import annotations

import multiprocessing
import os
import traceback
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext

import torch


def forward_batches(
    model, inputs: Iterator[tuple[torch.Tensor, dict[str, torch.Tensor]]], dtype: torch.dtype | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(rows, μ, log σ²)`` of each ``(rows, features)`` batch on the model's device, autocast in ``dtype``."""
    device = model.device
    autocast = torch.autocast(device.type, dtype=dtype) if dtype not in (None, torch.float32) else nullcontext()
    for rows, features in inputs:
        with autocast:
            output = model(**{name: tensor.to(device, non_blocking=True) for name, tensor in features.items()})
        yield rows, output.mu, output.logvar


_WORKER: dict = {}  # in a worker process: its model and device (start_worker)


def start_worker(model, devices, threads: int) -> None:
    """A worker process's start: take the next device of ``devices`` (a queue) and move the model there."""
    device = devices.get()
    if torch.device(device).type == "cpu":
        torch.set_num_threads(threads)
    _WORKER.update(model=model.to(device).eval(), device=device)


def worker_forward(rows: torch.Tensor, features: dict, dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """In a worker: ``(rows, μ, log σ²)`` (float32, CPU) of a batch; ``RuntimeError`` naming the device on an error."""
    try:
        with torch.inference_mode():
            _, mu, logvar = next(forward_batches(_WORKER["model"], iter([(rows, features)]), dtype))
    except Exception:
        raise RuntimeError(f"encode worker on {_WORKER['device']} failed:\n{traceback.format_exc()}") from None
    return rows, mu.float().cpu(), logvar.float().cpu()


class EncodePool:
    """Worker processes, one per device of ``devices`` (default: every CUDA device, else up to four CPU processes)."""

    def __init__(self, model, devices: Sequence[str | torch.device] | None = None) -> None:
        if devices is None and torch.cuda.is_available():
            devices = [f"cuda:{index}" for index in range(torch.cuda.device_count())]
        elif devices is None:
            devices = ["cpu"] * max(1, min(4, (os.cpu_count() or 1) // 2))
        try:
            self.devices = [str(torch.device(device)) for device in devices]
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"devices must be torch devices such as 'cuda:0' or 'cpu', got {devices!r}") from error
        if not self.devices:
            raise ValueError("devices must name at least one device, e.g. ['cuda:0', 'cuda:1'] or ['cpu', 'cpu']")
        context = multiprocessing.get_context("spawn")
        queued = context.Queue()
        for device in self.devices:
            queued.put(device)
        cpu_workers = sum(torch.device(device).type == "cpu" for device in self.devices)
        threads = max(1, (os.cpu_count() or 1) // max(1, cpu_workers))
        self.executor = ProcessPoolExecutor(
            len(self.devices), context, initializer=start_worker, initargs=(model, queued, threads)
        )

    def forward(
        self, inputs: Iterator[tuple[torch.Tensor, dict[str, torch.Tensor]]], dtype: torch.dtype | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(rows, μ, log σ²)`` of every batch; ``RuntimeError`` naming the device(s) when a worker fails."""
        if self.executor is None:
            raise RuntimeError("this EncodePool is closed: start another with model.start_multi_process_pool()")
        pending: deque[Future] = deque()
        try:
            for rows, features in inputs:
                pending.append(self.executor.submit(worker_forward, rows, features, dtype))
                if len(pending) >= 4 * len(self.devices):  # four batches handed out ahead per worker
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        except BrokenProcessPool as error:
            raise RuntimeError(f"an encode worker on {', '.join(self.devices)} exited: {error}") from None

    def close(self) -> None:
        """End the workers: each finishes its batch within 30 seconds, else it is terminated."""
        if self.executor is not None:
            processes = list(self.executor._processes.values())  # the executor's own; shutdown has no timeout
            self.executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                process.join(30.0)
                if process.is_alive():
                    process.terminate()
        self.executor = None

    def __enter__(self) -> EncodePool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
