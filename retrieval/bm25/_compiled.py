"""The BM25 query path's loops, compiled by numba (imported by ``retrieval.bm25.kernels`` only).

A document's score is ``0.0`` plus each query occurrence's contribution in query order (no
fast-math): the same bits as rank_bm25's sum. Top k keeps the best ``len(heap_scores)``
documents by (score descending, doc id ascending: a total order, as a full sort's) in a binary
heap whose root is the worst kept.

A term's postings come as pieces (``retrieval.bm25.layouts.Piece``): holder h's postings are
``bounds[h]:bounds[h + 1]``, a posting's contribution ``table[offsets[h] + code] * idf``.

Eligibility, passed as arrays (empty: no restriction): ``dead[position]`` marks a deleted
document, ``allowed`` holds the allowed doc ids sorted ascending.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_OPTIONS = {"cache": True, "nogil": True, "boundscheck": False, "error_model": "numpy"}


@njit(**_OPTIONS)
def scatter_add(buffer, positions, codes, bounds, offsets, table, idf):  # pragma: no cover
    """``buffer[positions[i]] += table[offsets[h] + codes[i]] * idf`` in order (positions
    unique within a term)."""
    for h in range(offsets.size):
        offset = offsets[h]
        for i in range(bounds[h], bounds[h + 1]):
            buffer[positions[i]] += table[offset + codes[i]] * idf


@njit(inline="always", **_OPTIONS)
def _allowed(doc_id, allowed):  # pragma: no cover - compiled
    """Whether `doc_id` is in `allowed` (sorted), by binary search."""
    low = _lower_bound(allowed, 0, allowed.size, doc_id)
    return low < allowed.size and allowed[low] == doc_id


@njit(inline="always", **_OPTIONS)
def _lower_bound(values, low, high, x):  # pragma: no cover - compiled
    """The first position in ``low:high`` of ``values`` (ascending) holding ``x`` or more."""
    while low < high:
        middle = (low + high) >> 1
        if values[middle] < x:
            low = middle + 1
        else:
            high = middle
    return low


@njit(inline="always", **_OPTIONS)
def _move(heap_scores, heap_ids, heap_positions, to, source):  # pragma: no cover - compiled
    heap_scores[to] = heap_scores[source]
    heap_ids[to] = heap_ids[source]
    heap_positions[to] = heap_positions[source]


@njit(**_OPTIONS)
def _push(heap_scores, heap_ids, heap_positions, n, score, doc_id, position):  # pragma: no cover
    """Push one document (which beats the root when full) to the heap holding `n`; the new
    `n`."""
    k = heap_scores.size
    if n < k:
        at = n
        n += 1
        while at > 0:
            parent = (at - 1) >> 1
            above = heap_scores[parent]
            if above < score or (above == score and heap_ids[parent] > doc_id):
                break
            _move(heap_scores, heap_ids, heap_positions, at, parent)
            at = parent
    else:
        at = 0
        while True:
            worse = 2 * at + 1
            if worse >= k:
                break
            right = worse + 1
            if right < k:
                left_score, right_score = heap_scores[worse], heap_scores[right]
                if right_score < left_score or (
                    right_score == left_score and heap_ids[right] > heap_ids[worse]
                ):
                    worse = right
            below = heap_scores[worse]
            if score < below or (score == below and doc_id > heap_ids[worse]):
                break
            _move(heap_scores, heap_ids, heap_positions, at, worse)
            at = worse
    heap_scores[at] = score
    heap_ids[at] = doc_id
    heap_positions[at] = position
    return n


@njit(inline="always", **_OPTIONS)
def _offer(
    heap_scores, heap_ids, heap_positions, n, score, ids, position, dead, allowed
):  # pragma: no cover - compiled
    """Offer a document scoring at least the heap's floor: pushed unless it ties the root
    with a larger id, is deleted or is not allowed; the new `n`."""
    doc_id = ids[position]
    if n == heap_scores.size and score == heap_scores[0] and doc_id > heap_ids[0]:
        return n
    if dead.size and dead[position]:
        return n
    if allowed.size and not _allowed(doc_id, allowed):
        return n
    return _push(heap_scores, heap_ids, heap_positions, n, score, doc_id, position)


@njit(**_OPTIONS)
def collect(
    buffer, positions, ids, dead, allowed, heap_scores, heap_ids, heap_positions, n
):  # pragma: no cover - compiled
    """Read the sums at `positions` out of `buffer`, zeroing them (a document is read once),
    and offer each eligible non-zero one to the heap holding `n`; the new `n`."""
    k = heap_scores.size
    floor = heap_scores[0] if n == k else -np.inf
    for j in range(positions.size):
        position = positions[j]
        score = buffer[position]
        buffer[position] = 0.0
        # Below the floor first: a branch the CPU predicts once the heap is full.
        if score < floor or score == 0.0:
            continue
        n = _offer(heap_scores, heap_ids, heap_positions, n, score, ids, position, dead, allowed)
        if n == k:
            floor = heap_scores[0]
    return n


@njit(**_OPTIONS)
def collect_recording(
    buffer,
    positions,
    ids,
    dead,
    allowed,
    heap_scores,
    heap_ids,
    heap_positions,
    n,
    out_positions,
    out_scores,
    m,
    reach,
    keep,
):  # pragma: no cover - compiled
    """``collect``, also appending to the out arrays (holding `m`) every eligible non-zero
    (position, score) whose score plus `reach` reaches ``keep`` times the heap's current
    floor; the new (n, m)."""
    k = heap_scores.size
    floor = heap_scores[0] if n == k else -np.inf
    lowest = floor * keep - reach
    for j in range(positions.size):
        position = positions[j]
        score = buffer[position]
        buffer[position] = 0.0
        if score < lowest or score == 0.0 or (dead.size and dead[position]):
            continue
        doc_id = ids[position]
        if allowed.size and not _allowed(doc_id, allowed):
            continue
        out_positions[m] = position
        out_scores[m] = score
        m += 1
        if score < floor or (n == k and score == floor and doc_id > heap_ids[0]):
            continue
        n = _push(heap_scores, heap_ids, heap_positions, n, score, doc_id, position)
        if n == k:
            floor = heap_scores[0]
            lowest = floor * keep - reach
    return n, m


@njit(**_OPTIONS)
def best_of(
    positions,
    codes,
    bounds,
    offsets,
    table,
    idf,
    ids,
    dead,
    allowed,
    heap_scores,
    heap_ids,
    heap_positions,
    n,
):  # pragma: no cover - compiled
    """Offer the eligible non-zero contributions of a piece's documents (unique) to the heap
    holding `n`; the new `n`."""
    k = heap_scores.size
    floor = heap_scores[0] if n == k else -np.inf
    for h in range(offsets.size):
        offset = offsets[h]
        for j in range(bounds[h], bounds[h + 1]):
            score = table[offset + codes[j]] * idf
            if score < floor or score == 0.0:
                continue
            n = _offer(
                heap_scores, heap_ids, heap_positions, n, score, ids, positions[j], dead, allowed
            )
            if n == k:
                floor = heap_scores[0]
    return n


@njit(**_OPTIONS)
def reaching(positions, scores, m, bound):  # pragma: no cover - compiled
    """Keep, in place and in order, the first `m` (position, score) pairs whose score is at
    least `bound`; how many are kept."""
    kept = 0
    for j in range(m):
        if scores[j] >= bound:
            positions[kept] = positions[j]
            scores[kept] = scores[j]
            kept += 1
    return kept


@njit(**_OPTIONS)
def add_found(
    buffer, candidates, positions, codes, bounds, offsets, table, idf
):  # pragma: no cover - compiled
    """``buffer[candidates[i]] += table[offsets[h] + codes[j]] * idf`` where
    ``positions[j] == candidates[i]`` (both ascending), each found by galloping."""
    size = positions.size
    at = 0
    holder = 0
    for i in range(candidates.size):
        target = candidates[i]
        if at >= size:
            break
        if positions[at] < target:
            step = 1
            low = at
            high = at + 1
            while high < size and positions[high] < target:
                low = high
                step <<= 1
                high = at + step
            if high > size:
                high = size
            # positions[low] < target <= positions[high] (or high == size)
            while low + 1 < high:
                middle = (low + high) >> 1
                if positions[middle] < target:
                    low = middle
                else:
                    high = middle
            at = high
        if at < size and positions[at] == target:
            while bounds[holder + 1] <= at:
                holder += 1
            buffer[target] += table[offsets[holder] + codes[at]] * idf
            at += 1


@njit(**_OPTIONS)
def zero_at(buffer, positions):  # pragma: no cover - compiled
    """``buffer[positions] = 0``."""
    for i in range(positions.size):
        buffer[positions[i]] = 0.0


@njit(**_OPTIONS)
def largest(codes, bounds, offsets, table, idf, heap, n):  # pragma: no cover - compiled
    """Offer a piece's contributions to a min-heap of the largest ``len(heap)`` (holding `n`);
    the new `n`."""
    k = heap.size
    for h in range(offsets.size):
        offset = offsets[h]
        for j in range(bounds[h], bounds[h + 1]):
            value = table[offset + codes[j]] * idf
            if n == k:
                if value <= heap[0]:
                    continue
                at = 0
                while True:
                    child = 2 * at + 1
                    if child >= k:
                        break
                    if child + 1 < k and heap[child + 1] < heap[child]:
                        child += 1
                    if value <= heap[child]:
                        break
                    heap[at] = heap[child]
                    at = child
                heap[at] = value
            else:
                at = n
                n += 1
                while at > 0:
                    parent = (at - 1) >> 1
                    if heap[parent] <= value:
                        break
                    heap[at] = heap[parent]
                    at = parent
                heap[at] = value
    return n


@njit(**_OPTIONS)
def holders_by_term(offsets, post_docs, docs, out):  # pragma: no cover - compiled
    """``out[t]`` = how many of ``docs`` (local document positions, ascending) term ``t``'s
    postings hold: a binary search for the first, then galloping to each next one."""
    first, last = docs[0], docs[docs.size - 1]
    for t in range(offsets.size - 1):
        high = offsets[t + 1]
        a = _lower_bound(post_docs, offsets[t], high, first)
        found = 0
        if a < high and post_docs[a] <= last:
            for i in range(docs.size):
                doc = docs[i]
                if post_docs[a] < doc:  # gallop to a bound, then search between
                    step, b = 1, a + 1
                    while b < high and post_docs[b] < doc:
                        a = b
                        step *= 2
                        b = a + step
                    a = _lower_bound(post_docs, a + 1, min(b, high), doc)
                    if a >= high:
                        break
                if post_docs[a] == doc:
                    found += 1
                    a += 1
                    if a >= high:
                        break
        out[t] = found
