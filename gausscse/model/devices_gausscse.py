"""Where the forward passes of ``encode`` run (ships with the weights): on the model's device ([`forward_batches`]),
or on several devices at once, in worker processes, one per device, each with a copy of the model, that run the
batches ``encode`` tokenises and pads in the calling process ([`EncodePool`]).

    pool = model.start_multi_process_pool(["cuda:0", "cuda:1"])  # or ["cpu", "cpu"]: two CPU processes
    embeddings = model.encode(sentences, pool=pool)  # the same Gaussians, in input order, as one device gives
    model.stop_multi_process_pool(pool)

``model.encode(sentences, device=[...])`` starts a pool for that call alone. The batches are the ones a single device
would run (the same sentences, the same padding), so each Gaussian is what ``model.encode`` gives on that device.
Workers start with the ``spawn`` method (CUDA needs it): a script that encodes with a pool must run it under
``if __name__ == "__main__":``, as sentence-transformers' multi-process encode asks.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import traceback
from collections.abc import Iterator, Sequence
from contextlib import nullcontext

import torch

IN_FLIGHT_PER_WORKER = 4  # batches handed out ahead of the results, per worker


def forward_batches(
    model, inputs: Iterator[tuple[torch.Tensor, dict[str, torch.Tensor]]], dtype: torch.dtype | None = None
) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """``(rows, μ, log σ²)`` of each ``(rows, features)`` batch: the model's forward on its device (copies that do not
    wait for it), under autocast in ``dtype`` when given."""
    device = model.device
    autocast = torch.autocast(device.type, dtype=dtype) if dtype not in (None, torch.float32) else nullcontext()
    for rows, features in inputs:
        with autocast:
            output = model(**{name: tensor.to(device, non_blocking=True) for name, tensor in features.items()})
        yield rows, output.mu, output.logvar


def default_devices() -> list[str]:
    """Every CUDA device, else four CPU processes at most (one per two cores)."""
    if torch.cuda.is_available():
        return [f"cuda:{index}" for index in range(torch.cuda.device_count())]
    return ["cpu"] * max(1, min(4, (os.cpu_count() or 1) // 2))


def serve_forward(model, device: str, threads: int, tasks, results) -> None:
    """A worker: the model on ``device``; ``(rows, features, dtype)`` from ``tasks`` → ``(rows, μ, log σ²)`` (float32,
    CPU) into ``results``, until ``None``. An error goes to ``results`` as ``("error", device, traceback)``."""
    try:
        if torch.device(device).type == "cpu":
            torch.set_num_threads(threads)
        model.to(device).eval()
        with torch.inference_mode():
            for rows, features, dtype in iter(tasks.get, None):
                _, mu, logvar = next(forward_batches(model, iter([(rows, features)]), dtype))
                results.put((rows, mu.float().cpu(), logvar.float().cpu()))
    except Exception:  # the calling process raises it, naming the device
        results.put(("error", device, traceback.format_exc()))


class EncodePool:
    """Worker processes that run ``encode``'s forward passes, one per device of ``devices`` (a device may repeat:
    ``["cpu"] * 4`` is four CPU processes, sharing the cores). Close it (``stop_multi_process_pool``, ``close`` or a
    ``with`` block) to end the workers."""

    def __init__(self, model, devices: Sequence[str | torch.device] | None = None) -> None:
        devices = default_devices() if devices is None else list(devices)
        if not devices:
            raise ValueError("devices must name at least one device, e.g. ['cuda:0', 'cuda:1'] or ['cpu', 'cpu']")
        try:
            self.devices = [str(torch.device(device)) for device in devices]
        except (RuntimeError, TypeError) as error:
            raise ValueError(f"devices must be torch devices such as 'cuda:0' or 'cpu', got {devices!r}") from error
        context = multiprocessing.get_context("spawn")
        self.tasks, self.results = context.Queue(), context.Queue()
        cpu_workers = sum(torch.device(device).type == "cpu" for device in self.devices)
        threads = max(1, (os.cpu_count() or 1) // max(1, cpu_workers))
        self.processes = [
            context.Process(target=serve_forward, args=(model, device, threads, self.tasks, self.results), daemon=True)
            for device in self.devices
        ]
        for process in self.processes:
            process.start()

    def forward(
        self, inputs: Iterator[tuple[torch.Tensor, dict[str, torch.Tensor]]], dtype: torch.dtype | None = None
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """``(rows, μ, log σ²)`` of every ``(rows, features)`` batch of ``inputs``, in the order the workers finish."""
        if not self.processes:
            raise RuntimeError("this EncodePool is closed: start another with model.start_multi_process_pool()")
        in_flight = 0
        for rows, features in inputs:
            self.tasks.put((rows, features, dtype))
            in_flight += 1
            if in_flight >= IN_FLIGHT_PER_WORKER * len(self.processes):
                yield self.next_result()
                in_flight -= 1
        for _ in range(in_flight):
            yield self.next_result()

    def next_result(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The next finished batch; ``RuntimeError`` naming the device when a worker failed or died."""
        while True:
            try:
                result = self.results.get(timeout=5)
                break
            except queue.Empty:
                dead = [
                    (device, process.exitcode)
                    for device, process in zip(self.devices, self.processes, strict=True)
                    if not process.is_alive()
                ]
                if dead:
                    raise RuntimeError(f"encode worker on {dead[0][0]} exited (status {dead[0][1]})") from None
        if isinstance(result[0], str):
            _, device, trace = result
            raise RuntimeError(f"encode worker on {device} failed:\n{trace}")
        return result

    def close(self) -> None:
        """End the workers (each finishes its batch first)."""
        for _ in self.processes:
            self.tasks.put(None)
        for process in self.processes:
            process.join(timeout=30)
            if process.is_alive():
                process.terminate()
        self.processes = []

    def __enter__(self) -> EncodePool:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def start_multi_process_pool(model, target_devices: Sequence[str | torch.device] | None = None) -> EncodePool:
    """An [`EncodePool`] of ``model`` on ``target_devices`` (default: every CUDA device, else CPU processes), for
    ``model.encode(..., pool=pool)`` (sentence-transformers' name)."""
    return EncodePool(model, target_devices)


def stop_multi_process_pool(pool: EncodePool) -> None:
    """End the pool's workers (sentence-transformers' name)."""
    pool.close()


__all__ = ["EncodePool", "forward_batches", "start_multi_process_pool", "stop_multi_process_pool"]
