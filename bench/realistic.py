"""Realistic benchmark vectors: the structure of the local model's embeddings of real text.

Why: ``hash`` vectors (feature hashing of Zipf-drawn tokens) have no neighbourhood structure,
so HNSW measured on them says nothing about HNSW on real embeddings (docs/performance.md,
"Vector recall"). Embedding a million chunks with the packaged model would take hours on this
machine, so the benchmark draws vectors from a model fitted to a real sample instead.

The sample (``bench/data/realistic_sample.json.gz``): 1,155 paragraphs of real English prose,
the project's own manual (README, docs/) and design docstrings as they were when the sample was
taken, frozen so figures stay comparable. They are the kind of technical text a knowledge base
holds, and shipping them keeps the benchmark standing alone.

The fit (``fit``), on the local model's (all-MiniLM-L6-v2, 384 dimensions) unit embeddings of
those paragraphs:

- k-means into one cluster per ~6 paragraphs (a sub-topic; fewer, larger clusters gave nearest
  neighbours clearly less similar than the sample's), cluster shares as in the sample;
- within a cluster, a point is its centroid plus Gaussian noise with the covariance of all
  within-cluster residuals (pooled; real embeddings vary along some directions far more than
  others, unlike isotropic noise), scaled to that cluster's own mean squared residual (shrunk
  towards the pooled one for clusters of few paragraphs), then renormalised: a mixture of
  von Mises-Fisher-like directions;
- queries: a question about a chunk is a sentence of it, not the chunk. The model's cosine
  between a sentence taken from a paragraph of three or more and that paragraph is measured
  on the sample (mean ~0.59); a query vector is a stored chunk's vector moved by the same
  shaped noise until its cosine to that chunk is one of those measured cosines (drawn at
  random), so queries come from the distribution of the chunks they are about.

Fitting embeds the sample once (the model's time for 1,155 paragraphs): the fitted parameters
are cached as a small ``.npz`` under ``RAG_DATA_DIR/bench/``, named by the sample's, model's
and fit's hash. Everything drawn afterwards comes from a seeded numpy Generator. ``realism``
compares the real sample with as many generated vectors: nearest-neighbour cosine and
random-pair cosine.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from django.conf import settings

SAMPLE_PATH = Path(__file__).resolve().parent / "data" / "realistic_sample.json.gz"
MODEL = "all-MiniLM-L6-v2"
PARAGRAPHS_PER_CLUSTER = 6
SHRINK = 4.0  # pseudo-paragraphs of the pooled spread added to each cluster's own
FIT_VERSION = 1


def sample_texts() -> list[str]:
    with gzip.open(SAMPLE_PATH, "rt", encoding="utf-8") as handle:
        return json.load(handle)


@dataclass(frozen=True)
class RealisticVectors:
    """A fitted mixture: draw chunk vectors and queries near them."""

    centroids: np.ndarray  # (K, D) float64, inside the unit ball
    shares: np.ndarray  # (K,) cluster shares, summing to 1
    spreads: np.ndarray  # (K,) noise scale of each cluster (unit-shaped noise times this)
    shape: np.ndarray  # (D, D): z @ shape.T is N(0, pooled covariance / its trace)
    query_cosines: np.ndarray  # measured sentence-to-paragraph cosines
    sample: np.ndarray  # (n, D) float32, the real sample's embeddings (for the realism check)

    @property
    def dimensions(self) -> int:
        return int(self.centroids.shape[1])

    def _noise(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.standard_normal((n, self.dimensions)) @ self.shape.T

    def chunks(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` unit float32 chunk vectors."""
        clusters = rng.choice(len(self.shares), size=n, p=self.shares)
        points = self.centroids[clusters] + self._noise(rng, n) * self.spreads[clusters, None]
        return _unit(points).astype(np.float32)

    def queries(self, rng: np.random.Generator, sources: np.ndarray) -> np.ndarray:
        """One unit float32 query vector per row of ``sources`` (stored chunk vectors), each at
        a cosine to its source drawn from the measured sentence-to-paragraph cosines."""
        sources = _unit(np.asarray(sources, dtype=np.float64))
        targets = rng.choice(self.query_cosines, size=len(sources))
        noise = self._noise(rng, len(sources))
        noise -= np.sum(noise * sources, axis=1, keepdims=True) * sources  # orthogonal part
        noise = _unit(noise)
        # cos(q, s) = c for q = c s + sqrt(1 - c^2) n, n a unit vector orthogonal to s
        c = targets[:, None]
        return _unit(c * sources + np.sqrt(1.0 - c * c) * noise).astype(np.float32)

    def realism(self, seed: int = 0) -> dict[str, float]:
        """Nearest-neighbour and random-pair cosine of the real sample and of as many generated
        vectors (mean, p10, p50, p90 each)."""
        rng = np.random.default_rng([seed, 5])
        generated = self.chunks(rng, len(self.sample))
        result: dict[str, float] = {}
        for name, vectors in (("real", self.sample), ("generated", generated)):
            result |= cosine_profile(vectors, rng, prefix=name)
        return result


def cosine_profile(vectors: np.ndarray, rng: np.random.Generator, prefix: str) -> dict:
    """Mean, p10, p50 and p90 of each vector's nearest-neighbour cosine and of random pairs',
    and the margin between the two means."""
    unit = _unit(np.asarray(vectors, dtype=np.float64))
    sims = unit @ unit.T
    np.fill_diagonal(sims, -2.0)
    nearest = sims.max(axis=1)
    i, j = rng.integers(0, len(unit), size=(2, 20_000))
    pairs = np.sum(unit[i[i != j]] * unit[j[i != j]], axis=1)
    result = {}
    for what, values in (("nn", nearest), ("pair", pairs)):
        result[f"{prefix}_{what}_cos_mean"] = round(float(values.mean()), 4)
        for p in (10, 50, 90):
            result[f"{prefix}_{what}_cos_p{p}"] = round(float(np.percentile(values, p)), 4)
    # How much closer a point's nearest neighbour is than a random point: the neighbourhood
    # structure a graph index follows (hash vectors all lean towards one mean, so their
    # neighbours are close but hardly closer than anything else).
    result[f"{prefix}_nn_margin"] = round(float(nearest.mean() - pairs.mean()), 4)
    return result


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0.0, 1.0, norms)


# --------------------------------------------------------------------------- fitting


def fit(seed: int = 0) -> RealisticVectors:
    """The fitted mixture, from the cache under RAG_DATA_DIR when there (else fitted and
    cached). Raises ProviderUnavailable when the local model is needed and not installed."""
    path = _cache_path(seed)
    if path.exists():
        with np.load(path) as stored:
            return RealisticVectors(**{k: stored[k] for k in stored.files})
    fitted = _fit(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npz")
    np.savez_compressed(partial, **fitted.__dict__)
    partial.replace(path)  # whole or absent, whatever another run reads
    return fitted


def _cache_path(seed: int) -> Path:
    digest = hashlib.sha256(SAMPLE_PATH.read_bytes())
    digest.update(f"{MODEL}:{FIT_VERSION}:{PARAGRAPHS_PER_CLUSTER}:{SHRINK}:{seed}".encode())
    return Path(settings.RAG_DATA_DIR) / "bench" / f"realistic-{digest.hexdigest()[:16]}.npz"


def _fit(seed: int) -> RealisticVectors:
    from sklearn.cluster import KMeans

    from knowledge.embeddings.local import LocalEmbedder

    texts = sample_texts()
    embedder = LocalEmbedder(MODEL)
    sample = np.asarray(embedder.embed_documents(texts), dtype=np.float64)
    n = len(sample)
    k = max(2, n // PARAGRAPHS_PER_CLUSTER)
    kmeans = KMeans(n_clusters=k, n_init=4, random_state=seed).fit(sample)
    labels, centroids = kmeans.labels_, kmeans.cluster_centers_
    residuals = sample - centroids[labels]
    sizes = np.bincount(labels, minlength=k).astype(np.float64)
    squared = np.bincount(labels, weights=np.sum(residuals**2, axis=1), minlength=k)
    pooled = float(squared.sum() / n)
    spreads = np.sqrt((squared + SHRINK * pooled) / (sizes + SHRINK))
    covariance = residuals.T @ residuals / max(1, n - k)
    eigenvalues, eigenvectors = np.linalg.eigh(covariance)
    eigenvalues = np.clip(eigenvalues, 0.0, None)
    shape = eigenvectors * np.sqrt(eigenvalues / eigenvalues.sum())  # E|z @ shape.T|^2 = 1
    sentences, paragraphs = _sentences(texts, np.random.default_rng([seed, 4]))
    sentence_vectors = np.asarray(embedder.embed_documents(sentences), dtype=np.float64)
    query_cosines = np.sum(sentence_vectors * sample[paragraphs], axis=1)
    return RealisticVectors(
        centroids=centroids,
        shares=sizes / sizes.sum(),
        spreads=spreads,
        shape=shape,
        query_cosines=query_cosines,
        sample=sample.astype(np.float32),
    )


def _sentences(texts: list[str], rng: np.random.Generator) -> tuple[list[str], list[int]]:
    """One random sentence (over 30 characters) of each paragraph of three or more."""
    sentences, paragraphs = [], []
    for i, text in enumerate(texts):
        parts = [s for s in re.split(r"(?<=[.;:])\s+", text) if len(s) > 30]
        if len(parts) >= 3:
            sentences.append(parts[int(rng.integers(0, len(parts)))])
            paragraphs.append(i)
    return sentences, paragraphs
