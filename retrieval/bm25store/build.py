"""Building a knowledge base's segments from the tokens stored at ingestion (never re-analysed).

A build reads the KB's ``index_version`` in the same REPEATABLE READ snapshot as the searchable
documents and chunks, so a manifest's version is exactly the data it holds.

- **full**: every searchable chunk, in segments of at most ``MAX_SEGMENT_TOKENS`` tokens.
- **delta**: the searchable documents' stamps compared with a stored manifest's: the chunks of
  documents gone or changed join the deletions (by the segments' ``groups``), those of
  documents new or changed make one new segment. Another analysis basis, or more than
  ``DELTA_MAX_FRACTION`` of the chunks, builds in full.

Builds read the database the search reads (``retrieval.replica.search_reads``); the store
writes what they make to the primary.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from django.db import DEFAULT_DB_ALIAS, connections

from knowledge.analysis import ANALYZER_VERSION
from knowledge.models import KnowledgeBase
from knowledge.selectors import searchable_document_sql
from retrieval.bm25.segment import Segment
from retrieval.bm25store.fetch import fetch_segments
from retrieval.bm25store.manifest import Manifest, analysis_basis
from retrieval.core.snapshot import snapshot
from retrieval.core.stamps import (
    NOT_PROCESSED,
    PROCESSED_AT_BYTES,
    document_stamp,
    micros_since_1970,
)
from retrieval.replica import search_reads

DELTA_MAX_FRACTION = 0.3  # of the live chunks a delta deletes or adds: more builds in full
# The searchable documents' ids, processed_at and analyser versions packed in one value
# (big-endian int8, int8, int4) that numpy unpacks at once; sorted here.
_SELECT_DOCUMENTS = (
    "SELECT string_agg(int8send(id) || "  # noqa: S608
    f"{PROCESSED_AT_BYTES} || int4send(analyzer_version::int4), '') "
    "FROM knowledge_document d "
    f"WHERE tenant_id = %s AND knowledge_base_id = %s AND {searchable_document_sql('d')}"
)
_PACKED_DOCUMENT = np.dtype([("id", ">i8"), ("at", ">i8"), ("analyzer", ">i4")])


@dataclass(frozen=True)
class Built:
    """What a build made: the manifest and the segments it adds (a full build: all of them)."""

    manifest: Manifest
    new_segments: dict[str, Segment]
    full: bool
    seconds: float


def new_key() -> str:
    return uuid.uuid4().hex


def build_full(knowledge_base: KnowledgeBase) -> Built:
    """Every searchable chunk, in segments. Raises KnowledgeBase.DoesNotExist if the KB is
    gone."""
    started = time.perf_counter()
    alias = search_reads()
    with snapshot(using=alias):
        version, basis = _version_and_basis(knowledge_base, alias)
        doc_ids, stamps = documents_state(knowledge_base, alias)
        segments = {new_key(): s for s in fetch_segments(knowledge_base, using=alias) if len(s)}
    seconds = time.perf_counter() - started
    manifest = Manifest(
        version=version,
        keys=tuple(segments),
        deleted=np.empty(0, np.int64),
        deleted_in=np.empty(0, np.int32),
        doc_ids=doc_ids,
        doc_stamps=stamps,
        basis=basis,
        chunk_count=sum(map(len, segments.values())),
        build_seconds=seconds,
    )
    return Built(manifest, segments, True, seconds)


def build_delta(
    knowledge_base: KnowledgeBase, base: Manifest, segments: Mapping[str, Segment]
) -> Built | None:
    """The KB's current version as ``base`` (its ``segments`` by key) plus at most one new
    segment; None when a full build is due. Raises KnowledgeBase.DoesNotExist if the KB is
    gone."""
    started = time.perf_counter()
    alias = search_reads()
    with snapshot(using=alias):
        version, basis = _version_and_basis(knowledge_base, alias)
        if basis != base.basis:
            return None
        doc_ids, stamps = documents_state(knowledge_base, alias)
        unchanged = _unchanged(base, doc_ids, stamps)
        base_kept = np.isin(base.doc_ids, doc_ids[unchanged])  # base documents still the same
        gone = base.doc_ids[~base_kept]
        fresh = doc_ids[~unchanged]
        deleted, deleted_in = [base.deleted], [base.deleted_in]
        newly = 0
        if gone.size:
            for position, (key, already) in enumerate(
                zip(base.keys, base.deletions(), strict=True)
            ):
                segment = segments[key]
                if segment.groups is None:
                    return None  # a segment without owners cannot delete by document
                ids = np.setdiff1d(segment.doc_ids[np.isin(segment.groups, gone)], already)
                deleted.append(ids)
                deleted_in.append(np.full(ids.size, position, np.int32))
                newly += ids.size
        live = base.chunk_count - newly
        # One segment, however many tokens (merges fold it in later).
        fetched = fetch_segments(knowledge_base, fresh, alias, sys.maxsize) if fresh.size else []
    added = sum(map(len, fetched))
    if newly + added > DELTA_MAX_FRACTION * max(live, 1):
        return None
    new_segments = {new_key(): segment for segment in fetched if len(segment)}
    manifest = Manifest(
        version=version,
        keys=base.keys + tuple(new_segments),
        deleted=np.concatenate(deleted),
        deleted_in=np.concatenate(deleted_in),
        doc_ids=doc_ids,
        doc_stamps=stamps,
        basis=basis,
        merges=base.merges,
        chunk_count=live + added,
        build_seconds=base.build_seconds,
    )
    return Built(manifest, new_segments, False, time.perf_counter() - started)


def _unchanged(base: Manifest, doc_ids: np.ndarray, stamps: np.ndarray) -> np.ndarray:
    """Per current document: whether the base holds it with the same stamp."""
    at = np.minimum(np.searchsorted(base.doc_ids, doc_ids), max(base.doc_ids.size - 1, 0))
    if not base.doc_ids.size:
        return np.zeros(doc_ids.size, bool)
    return (base.doc_ids[at] == doc_ids) & (base.doc_stamps[at] == stamps)


def current_version(knowledge_base: KnowledgeBase) -> int:
    """The KB's index_version as committed now, on the database a build would read (so the
    version asked for and the version built agree)."""
    version = (
        KnowledgeBase.objects.using(search_reads())
        .filter(pk=knowledge_base.pk, tenant_id=knowledge_base.tenant_id)
        .values_list("index_version", flat=True)
        .first()
    )
    if version is None:
        raise KnowledgeBase.DoesNotExist(f"knowledge base {knowledge_base.pk} does not exist")
    return version


def _version_and_basis(knowledge_base: KnowledgeBase, using: str | None = None) -> tuple[int, str]:
    row = (
        KnowledgeBase.objects.db_manager(using)
        .filter(pk=knowledge_base.pk, tenant_id=knowledge_base.tenant_id)
        .values_list("index_version", "user_words")
        .first()
    )
    if row is None:
        raise KnowledgeBase.DoesNotExist(f"knowledge base {knowledge_base.pk} is gone")
    return row[0], analysis_basis(ANALYZER_VERSION, row[1])


def documents_state(
    knowledge_base: KnowledgeBase, using: str | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The searchable documents (ids ascending) and their stamps, from database ``using``."""
    with connections[using or DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(_SELECT_DOCUMENTS, [knowledge_base.tenant_id, knowledge_base.pk])
        packed = cursor.fetchone()[0]
    if not packed:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    rows = np.frombuffer(packed, dtype=_PACKED_DOCUMENT)
    rows = rows[np.argsort(rows["id"], kind="stable")]
    micros = micros_since_1970(rows["at"])
    micros[micros == NOT_PROCESSED] = 0  # a stamp of 0 for "never processed", as ever
    return rows["id"].astype(np.int64), document_stamp(micros, rows["analyzer"].astype(np.int64))
