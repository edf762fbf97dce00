"""``backend="torch"``: no shortlist; the index scores every stored item by chunked matrix products on its device."""

from .base import SearchBackend


class ExactScan(SearchBackend):
    """``backend="torch"``: scores every stored item ([`SearchBackend.candidates`] returns ``None``)."""

    name = "torch"
    cpu_only = False
