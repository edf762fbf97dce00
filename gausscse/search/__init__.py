"""Entailment search over many Gaussians: which stored sentences entail a query, and which does it entail.

``GaussianIndex`` keeps μ and log σ² of the stored sentences and answers exactly, by chunked matrix products:
``entailing(q, k)`` ranks the items x by sim(q‖x) (x covers q: evidence that entails the claim q),
``entailed_by(q, k)`` by sim(x‖q) (what q entails). With the ``sum`` reduction the score is a monotone function of
the inner product of ``kl_feature_map`` vectors, which is what an inner-product index (FAISS) can serve; that backend
and approximate search come next.
"""

from .index import GaussianIndex

__all__ = ["GaussianIndex"]
