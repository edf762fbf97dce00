"""Where encode runs: the model's device, or [`EncodePool`] workers (``spawn``: run under ``__main__``)."""

from __future__ import annotations

import multiprocessing
import os
import sys
import traceback
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext

import torch

from .utils_gausscse import model_fingerprint

WORKER_START_SECONDS = 300.0  # how long the workers may take to start (load the model) before encode gives up


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


def worker_ready() -> str:
    """In a worker: its device, once it has started."""
    return _WORKER["device"]


def unavailable(device: torch.device) -> str | None:
    """Why ``device`` cannot run here (no such accelerator, or fewer of them), or ``None``."""
    backend = getattr(torch, device.type, None)  # torch.cuda, torch.mps, torch.xpu, ...; none for cpu and meta
    if device.type == "cpu" or not hasattr(backend, "is_available"):
        return None
    if not backend.is_available():
        return f"{device}: this machine has no {device.type} device"
    count = backend.device_count() if hasattr(backend, "device_count") else 1
    if (device.index or 0) >= count:
        return f"{device}: this machine has {count} {device.type} device(s), numbered from 0"
    return None


def check_main_module() -> None:
    """``RuntimeError`` where spawned workers cannot re-import the main module (a script read from standard input)."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file is not None and not os.path.exists(main_file):
        raise RuntimeError(
            f"encode on several devices starts worker processes that re-import your main module, and {main_file!r} "
            'is no file they can read: run a script file (its encode under `if __name__ == "__main__":`) or '
            "encode on one device (device='cpu')"
        )


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
        missing = [reason for reason in map(unavailable, map(torch.device, self.devices)) if reason]
        if missing:
            raise ValueError(f"cannot encode on {', '.join(missing)}")
        check_main_module()
        self.fingerprint = model_fingerprint(model)  # the model the workers hold: encode checks it is the caller's
        context = multiprocessing.get_context("spawn")
        queued = context.Queue()
        for device in self.devices:
            queued.put(device)
        cpu_workers = sum(torch.device(device).type == "cpu" for device in self.devices)
        threads = max(1, (os.cpu_count() or 1) // max(1, cpu_workers))
        self.executor = ProcessPoolExecutor(
            len(self.devices), context, initializer=start_worker, initargs=(model, queued, threads)
        )
        started = [self.executor.submit(worker_ready) for _ in self.devices]
        try:
            for future in started:
                future.result(timeout=WORKER_START_SECONDS)
        except (BrokenProcessPool, TimeoutError) as error:
            self.close()
            raise RuntimeError(
                f"the encode workers on {', '.join(self.devices)} did not start ({type(error).__name__}: {error}); "
                "encode on one device (device='cpu') or see the workers' errors above"
            ) from None

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
