"""An inverted file (IVF) over a large host base's unit rows: spherical k-means on a seeded
sample, every row assigned in blocks; a query scores the rows of the ``probes`` lists nearest to
it, ``probes`` calibrated per base on its own rows (``calibrate``)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

SEED = 20261123  # the sample, the initial centroids and the calibration queries: reproducible
ROWS_PER_LIST = 50  # k-means sample: rows per list
ITERATIONS = 8
CALIBRATION_QUERIES = 400  # enough that the probes calibrated vary little with the seed
K = 10  # recall@K is what the calibration targets
QUERY_COSINE = 0.35  # calibration queries' cosine with the row they come from
_BLOCK_SCORES = 1 << 23  # float32 scores per block (32 MB) when rows meet centroids or queries


@dataclass(frozen=True)
class Ivf:
    """The lists of a base stored list by list: list ``i`` is rows ``offsets[i]:offsets[i+1]``."""

    centroids: np.ndarray  # float32 (lists, dimensions), unit rows (memory-mapped)
    offsets: np.ndarray  # int64 (lists + 1,), 0 first and the base's rows last
    probes: int  # lists a query scores, calibrated
    recall: float  # mean recall@10 measured at ``probes`` when it was built
    build_s: float  # k-means, assignment and calibration
    scan_share: float = 0.0  # mean share of the rows the calibration queries' probes scanned
    codes: np.ndarray | None = None  # int8 (rows, dimensions) (``quantize``), memory-mapped
    scales: np.ndarray | None = None  # float32 (rows,)

    @property
    def lists(self) -> int:
        return len(self.centroids)

    def runs(self, query: np.ndarray) -> list[tuple[int, int]]:
        """Row ranges (start, stop) of the ``probes`` lists nearest to ``query`` (a unit
        vector), in row order, adjacent lists merged into one range and empty ones left out."""
        scores = self.centroids @ query
        probes = min(self.probes, self.lists)
        chosen = np.sort(np.argpartition(-scores, probes - 1)[:probes])
        starts, stops = self.offsets[chosen], self.offsets[chosen + 1]
        runs: list[tuple[int, int]] = []
        for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
            if start == stop:
                continue
            if runs and runs[-1][1] == start:
                runs[-1] = (runs[-1][0], stop)
            else:
                runs.append((start, stop))
        return runs


@dataclass(frozen=True)
class Built:
    ivf: Ivf
    permutation: np.ndarray  # int64: stored row i is given row permutation[i]


# A code is off by at most half a step in each dimension, so a row's cosine with a unit query q
# is within scale * 0.5 * sum|q| of scale * (q . codes); 0.51 also covers float32 rounding.
SLACK_PER_L1 = 0.51


def quantize(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, float32 scales) of float32 ``rows``: row i is about ``scales[i] *
    codes[i]``, its largest component exactly +-127 steps; a zero row has scale 0."""
    rows = np.asarray(rows, dtype=np.float32)
    largest = np.abs(rows).max(axis=1) if rows.size else np.zeros(len(rows), np.float32)
    scales = (largest / 127).astype(np.float32)
    steps = np.where(scales > 0, scales, np.float32(1))[:, None]
    codes = np.clip(np.rint(rows / steps), -127, 127).astype(np.int8)
    return codes, scales


def lists_for(rows: int) -> int:
    return max(1, min(rows, round(2 * math.sqrt(rows))))


def build(vectors: np.ndarray, target_recall: float) -> Built:
    """The IVF of ``vectors`` (unit float32 rows), its probes calibrated."""
    started = time.perf_counter()
    rows = len(vectors)
    lists = lists_for(rows)
    rng = np.random.default_rng(SEED)
    picked = np.sort(rng.choice(rows, size=min(rows, ROWS_PER_LIST * lists), replace=False))
    centroids = kmeans(np.asarray(vectors[picked], dtype=np.float32), lists, rng)
    labels, _ = assign(vectors, centroids)
    permutation = np.argsort(labels, kind="stable").astype(np.int64)
    offsets = np.zeros(lists + 1, dtype=np.int64)
    offsets[1:] = np.cumsum(np.bincount(labels, minlength=lists))
    probes, recall, share = calibrate(vectors, labels, centroids, target_recall, rng)
    ivf = Ivf(centroids, offsets, probes, recall, time.perf_counter() - started, share)
    return Built(ivf, permutation)


def kmeans(sample: np.ndarray, lists: int, rng: np.random.Generator) -> np.ndarray:
    """Spherical k-means: ``lists`` unit centroids of the unit rows of ``sample``, started
    from distinct random rows; a list left empty takes the row its centroid fits worst."""
    centroids = sample[rng.choice(len(sample), size=lists, replace=False)].copy()
    for _ in range(ITERATIONS):
        labels, fit = assign(sample, centroids)
        sums = np.zeros_like(centroids)
        np.add.at(sums, labels, sample)
        empty = np.flatnonzero(np.bincount(labels, minlength=lists) == 0)
        if empty.size:
            worst = np.argsort(fit, kind="stable")[: empty.size]
            sums[empty] = sample[worst]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        centroids = sums / np.where(norms == 0, 1, norms)
    return centroids.astype(np.float32)


def assign(vectors: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's nearest centroid (int64) and its similarity to it, computed in blocks."""
    block = max(1, _BLOCK_SCORES // len(centroids))
    labels = np.empty(len(vectors), dtype=np.int64)
    fit = np.empty(len(vectors), dtype=np.float32)
    for start in range(0, len(vectors), block):
        scores = np.asarray(vectors[start : start + block], dtype=np.float32) @ centroids.T
        labels[start : start + block] = best = np.argmax(scores, axis=1)
        fit[start : start + block] = scores[np.arange(len(best)), best]
    return labels, fit


def calibration_queries(
    vectors: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """(rows the queries come from, unit float32 queries): each a sampled row ``x`` moved to
    cosine ``c = QUERY_COSINE`` from it, ``c x + sqrt(1 - c^2) n`` with ``n`` a random unit
    direction orthogonal to ``x`` (rows themselves as queries calibrate far too few probes)."""
    n = min(CALIBRATION_QUERIES, len(vectors))
    sources = np.sort(rng.choice(len(vectors), size=n, replace=False))
    rows = np.asarray(vectors[sources], dtype=np.float64)
    noise = rng.standard_normal(rows.shape)
    noise -= np.sum(noise * rows, axis=1, keepdims=True) * rows
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    queries = QUERY_COSINE * rows + math.sqrt(1 - QUERY_COSINE**2) * noise
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return sources, queries.astype(np.float32)


def calibrate(
    vectors: np.ndarray,
    labels: np.ndarray,
    centroids: np.ndarray,
    target_recall: float,
    rng: np.random.Generator,
) -> tuple[int, float, float]:
    """(probes, mean recall@10 there, mean share of rows scanned): the fewest probes for mean
    recall@10 >= ``target_recall`` on ``calibration_queries``, source rows excluded. One exact
    scan gives recall at every ``p``: the share of the top 10 in the ``p`` nearest lists."""
    sources, queries = calibration_queries(vectors, rng)
    k = min(K, len(vectors) - 1)
    if k < 1:
        return len(centroids), 1.0, 1.0
    neighbours = _exact_top(vectors, queries, sources, k)
    by_centroid = np.argsort(-(queries @ centroids.T), axis=1, kind="stable")
    rank = np.empty_like(by_centroid)
    np.put_along_axis(rank, by_centroid, np.arange(len(centroids))[None, :], axis=1)
    needed = np.take_along_axis(rank, labels[neighbours], axis=1)  # 0: the nearest list
    found = np.cumsum(np.bincount(needed.ravel(), minlength=len(centroids)))
    recall = found / needed.size
    probes = int(np.argmax(recall >= target_recall - 1e-9)) + 1
    sizes = np.bincount(labels, minlength=len(centroids))
    share = float(sizes[by_centroid[:, :probes]].sum(axis=1).mean() / len(vectors))
    return probes, float(recall[probes - 1]), share


def _exact_top(vectors: np.ndarray, queries: np.ndarray, sources: np.ndarray, k: int):
    """Row positions of each query's exact top ``k`` (not in order), its source row excluded."""
    block = max(k + 1, _BLOCK_SCORES // len(queries))
    best_rows = np.empty((len(queries), 0), dtype=np.int64)
    best_scores = np.empty((len(queries), 0), dtype=np.float32)
    for start in range(0, len(vectors), block):
        scores = queries @ np.asarray(vectors[start : start + block], dtype=np.float32).T
        own = (sources >= start) & (sources < start + scores.shape[1])
        scores[own, sources[own] - start] = -np.inf
        top = np.argpartition(-scores, min(k, scores.shape[1]) - 1, axis=1)[:, :k]
        best_rows = np.concatenate([best_rows, top + start], axis=1)
        best_scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
        keep = np.argpartition(-best_scores, k - 1, axis=1)[:, :k]
        best_rows = np.take_along_axis(best_rows, keep, axis=1)
        best_scores = np.take_along_axis(best_scores, keep, axis=1)
    return best_rows
