"""Helpers shared by the bench scripts: the JSON payload they save, and peak memory.

Each method runs in a fresh worker process, so the memory it adds is its own. ``ru_maxrss`` only ever grows within
a process, so it misses a step whose peak stays below the peak of loading the model; :class:`ResidentPeak` samples
the current resident set size instead."""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch


def resident_bytes() -> int:
    """This process's current resident set size (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_resident_bytes() -> int:
    """This process's peak resident set size so far, in bytes (``ru_maxrss``: KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class ResidentPeak:
    """``with ResidentPeak() as peak: ...`` then ``peak.extra_bytes``: the highest resident set size sampled every
    ``interval`` seconds inside the block, minus the size on entry."""

    def __init__(self, interval: float = 0.002):
        self.interval = interval
        self.extra_bytes = 0

    def _sample(self) -> None:
        while not self._done.wait(self.interval):
            self._peak = max(self._peak, resident_bytes())

    def __enter__(self) -> ResidentPeak:
        self._start = self._peak = resident_bytes()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._done.set()
        self._thread.join()
        self._peak = max(self._peak, resident_bytes())
        self.extra_bytes = self._peak - self._start


REPO_ROOT = Path(__file__).resolve().parent.parent


def run_worker(module: str, arguments: list[str]) -> dict:
    """Run ``python -m module --worker ... arguments`` (from the repository root) and return the JSON object on its
    last stdout line."""
    result = subprocess.run(
        [sys.executable, "-m", module, *arguments], cwd=REPO_ROOT, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"{module} worker {arguments} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def json_payload(args: argparse.Namespace, device_name: str, **results) -> dict:
    """What a bench script saves with ``--json``: its arguments (not the worker flag), the machine, then ``results``."""
    return {
        **{key: value for key, value in vars(args).items() if key != "worker"},
        "json": str(args.json),
        "device_name": device_name,
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        **results,
    }


@contextmanager
def milvus_lite_server(data_dir: Path) -> Iterator[str]:
    """A Milvus Lite gRPC server (``milvus-lite server``, its own process) on a free local port, serving ``data_dir``;
    yields its URL and stops it at the end."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [str(Path(sys.executable).parent / "milvus-lite"), "server", "--data-dir", str(data_dir)]
    server = subprocess.Popen(
        [*command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        line = server.stdout.readline()
        if "listening" not in line:
            raise RuntimeError(f"milvus-lite server did not start: {line.strip()}")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=60)
