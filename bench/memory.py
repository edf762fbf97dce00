"""Peak-memory helpers shared by the bench scripts: each method runs in a fresh worker process, so the peak
resident set size it adds is its own (``ru_maxrss`` only ever grows within a process)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def run_worker(script: str, arguments: list[str]) -> dict:
    """Run ``python script --worker ... arguments`` and return the JSON object on its last stdout line."""
    result = subprocess.run([sys.executable, script, *arguments], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{script} worker {arguments} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])
