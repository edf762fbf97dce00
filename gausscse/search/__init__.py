"""Entailment search over many Gaussians: which stored sentences entail a query, and which does it entail.

``GaussianIndex`` keeps μ and log σ² of the stored sentences and answers ``entailing(q, k)`` (items x ranked by
sim(q‖x): x covers q, evidence that entails the claim q) and ``entailed_by(q, k)`` (ranked by sim(x‖q): what q
entails) — exactly by chunked matrix products (``backend="torch"``), or through FAISS on the ``kl_feature_map``
vectors, whose inner product is −KL (``"faiss"``: flat, ``"faiss-hnsw"``: approximate), or in a vector database
(embedded LanceDB: ``"lancedb"``, ``"lancedb-ann"``; Qdrant and Milvus, local or a server: ``"qdrant"``,
``"qdrant-hnsw"``, ``"milvus"``, ``"milvus-hnsw"``), always re-scored exactly; the approximate
backends search the vectors turned into a nearest-neighbour problem (``gausscse.search.lift``).
``SentenceIndex`` adds the sentences and the model: ``SentenceIndex.build(model, corpus)``, then
``.entailing(model, claims, k)``; the command line is ``gausscse-search build|query`` (``gausscse.cli.search``).
``encode_on_ray`` encodes a corpus on a Ray cluster (``GaussianEncoder``: its Ray Data worker; Ray itself is optional
and imported only when they run).
"""

from .backends import BACKENDS
from .corpus import Hit, ModelMismatchError, SentenceIndex, model_fingerprint
from .index import GaussianIndex
from .ray_encode import GaussianEncoder, encode_on_ray

__all__ = [
    "BACKENDS",
    "GaussianEncoder",
    "GaussianIndex",
    "Hit",
    "ModelMismatchError",
    "SentenceIndex",
    "encode_on_ray",
    "model_fingerprint",
]
