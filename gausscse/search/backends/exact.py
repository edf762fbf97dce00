"""``backend="torch"``: no shortlist — every stored item is scored by the index's chunked matrix products, on the CPU
or a GPU (the index's ``device``); exact for every reduction and for the search score."""

from __future__ import annotations

from typing import ClassVar

from .base import SearchBackend


class ExactScan(SearchBackend):
    """Scores every stored item: [`SearchBackend.candidates`] returns ``None``."""

    name = "torch"
    cpu_only: ClassVar[bool] = False


__all__ = ["ExactScan"]
