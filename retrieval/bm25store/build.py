"""Building a knowledge base's segments from the tokens stored at ingestion (never re-analysed).

Only searchable chunks are indexed (``knowledge.selectors.SEARCHABLE_CHUNK``: enabled chunks of
ready, enabled documents). Every build reads the KB's ``index_version`` first and in the same
REPEATABLE READ snapshot as the documents and chunks, so the version a manifest is labelled with
is exactly the data it holds. (Called inside a caller's transaction, the snapshot is that
transaction's; the version is still read first, and a label older than the content is safe:
readers of the newer version do not take it as theirs.)

Two kinds of build:

- **full**: every searchable chunk, cut into segments of at most ``MAX_SEGMENT_TOKENS`` tokens
  (``plan_segments``); seconds at 100k chunks, most of it fetching.
- **delta**: from the newest stored manifest. The searchable documents and their stamps
  (``processed_at`` and analyser version: one small table, the chunk table untouched) are
  compared with the manifest's: the chunks of documents gone or changed are added to the
  deletions (found by the segments' ``groups``, each chunk's document id, without asking the
  database), and the chunks of documents new or changed are fetched (only theirs: milliseconds
  for one document) into one small segment. A different analysis basis (analyser version or
  user words), or a delta touching more than ``DELTA_MAX_FRACTION`` of the chunks, builds in
  full instead.

Fetching is the expensive half of a full build: turning 12M array elements into Python strings
costs more than building the index. So PostgreSQL joins each chunk's tokens into one UTF-8
``bytea`` (with a separator the analyser never emits), Python splits bytes (no decoding per
token), and one dict maps each distinct term's bytes to a single ``str``: 12M tokens become
pointers to ~50k strings, which also makes the build's own dict lookups faster. A row whose
split does not give ``cardinality(tokens)`` tokens (a token holding the separator, or an empty
or NULL element) is fetched again as an array.

Builds, full or delta, read the database the search reads (``retrieval.replica.search_reads``:
a replica only inside a search that checked it holds the version asked for; the primary outside
a search, so the warm-up after a change and the merges never meet a lagging replica). The
version, documents and tokens come from that one database's snapshot, so the label is still
exactly the content; what a build stores (segment and manifest rows) is written to the primary
by the store.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import BinaryField, F, Func, IntegerField, Value

from knowledge.analysis import ANALYZER_VERSION
from knowledge.models import Chunk, KnowledgeBase
from knowledge.selectors import SEARCHABLE_CHUNK, searchable_document_sql
from retrieval.bm25.segment import MAX_SEGMENT_TOKENS, Segment, plan_segments
from retrieval.bm25store.manifest import Manifest, analysis_basis, document_stamp
from retrieval.replica import search_reads

# The analyser's normalisation removes C0 controls, so no stored token holds this one.
_SEPARATOR = "\x1f"
_FETCH_ROWS = 5000


# A delta deleting or adding more than this fraction of the live chunks is built in full.
DELTA_MAX_FRACTION = 0.3
_SELECT_DOCUMENTS = (
    "SELECT id, (extract(epoch FROM processed_at) * 1000000)::bigint, analyzer_version "  # noqa: S608
    "FROM knowledge_document d "
    f"WHERE tenant_id = %s AND knowledge_base_id = %s AND {searchable_document_sql('d')} "
    "ORDER BY id"
)


@dataclass(frozen=True)
class Built:
    """What a build made: the manifest and the segments it adds (a full build: all of them)."""

    manifest: Manifest
    new_segments: dict[str, Segment]
    full: bool
    seconds: float


class _Terms(dict):
    """bytes -> the one ``str`` of that term; decodes each distinct term once."""

    def __missing__(self, key: bytes) -> str:
        term = self[key] = key.decode()
        return term


def new_key() -> str:
    return uuid.uuid4().hex


def build_full(knowledge_base: KnowledgeBase, merges: int = 0) -> Built:
    """Every searchable chunk, in segments; labelled with the version it reflects. Raises
    KnowledgeBase.DoesNotExist if the KB is gone."""
    started = time.perf_counter()
    alias = search_reads()
    with snapshot(using=alias):
        version, basis = _version_and_basis(knowledge_base, alias)
        doc_ids, stamps = documents_state(knowledge_base, alias)
        ids, corpus, groups = fetch_tokens(knowledge_base, using=alias)
    lengths = [len(tokens) for tokens in corpus]
    segments = {}
    for part in plan_segments(lengths, MAX_SEGMENT_TOKENS) if ids else []:
        segments[new_key()] = Segment.build(ids[part], corpus[part], groups[part])
    seconds = time.perf_counter() - started
    manifest = Manifest(
        version=version,
        keys=tuple(segments),
        deleted=np.empty(0, np.int64),
        deleted_in=np.empty(0, np.int32),
        doc_ids=doc_ids,
        doc_stamps=stamps,
        basis=basis,
        merges=merges,
        chunk_count=len(ids),
        build_seconds=seconds,
    )
    return Built(manifest, segments, True, seconds)


def build_delta(
    knowledge_base: KnowledgeBase, base: Manifest, segments: Mapping[str, Segment]
) -> Built | None:
    """The manifest of the KB's current version made from ``base`` (whose segments are
    ``segments``, by key) plus at most one new segment; None when a full build is due (another
    analysis basis, or too large a change). Raises KnowledgeBase.DoesNotExist if the KB is
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
        ids, corpus, groups = (
            fetch_tokens(knowledge_base, fresh, using=alias) if fresh.size else ([], [], [])
        )
    if newly + len(ids) > DELTA_MAX_FRACTION * max(live, 1):
        return None
    new_segments = {new_key(): Segment.build(ids, corpus, groups)} if ids else {}
    manifest = Manifest(
        version=version,
        keys=base.keys + tuple(new_segments),
        deleted=np.concatenate(deleted),
        deleted_in=np.concatenate(deleted_in),
        doc_ids=doc_ids,
        doc_stamps=stamps,
        basis=basis,
        merges=base.merges,
        chunk_count=live + len(ids),
        build_seconds=base.build_seconds,
    )
    return Built(manifest, new_segments, False, time.perf_counter() - started)


def _unchanged(base: Manifest, doc_ids: np.ndarray, stamps: np.ndarray) -> np.ndarray:
    """Per current document: whether the base holds it with the same stamp."""
    at = np.minimum(np.searchsorted(base.doc_ids, doc_ids), max(base.doc_ids.size - 1, 0))
    if not base.doc_ids.size:
        return np.zeros(doc_ids.size, bool)
    return (base.doc_ids[at] == doc_ids) & (base.doc_stamps[at] == stamps)


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
    """The searchable documents (ids ascending) and their stamps (inside the caller's
    snapshot, if any), from database ``using`` (default: the primary)."""
    with connections[using or DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(_SELECT_DOCUMENTS, [knowledge_base.tenant_id, knowledge_base.pk])
        rows = cursor.fetchall()
    if not rows:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    ids, micros, analyzers = (
        np.array(c, dtype=np.int64)
        for c in zip(*[(r[0], r[1] or 0, r[2]) for r in rows], strict=True)
    )
    return ids, document_stamp(micros, analyzers)


@contextmanager
def snapshot(using: str | None = None):
    """A REPEATABLE READ, read-only transaction on database ``using`` (default: the primary),
    or the caller's own there, if one is open."""
    connection = connections[using or DEFAULT_DB_ALIAS]
    if connection.in_atomic_block:
        yield
        return
    with transaction.atomic(using=connection.alias):
        with connection.cursor() as cursor:
            cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        yield


def _ready_chunks(knowledge_base: KnowledgeBase, using: str | None = None):
    return (
        Chunk.objects.db_manager(using)
        .filter(
            SEARCHABLE_CHUNK,  # curation: the one definition of searchable
            tenant_id=knowledge_base.tenant_id,
            knowledge_base_id=knowledge_base.pk,
        )
        .order_by()
    )


def fetch_tokens(
    knowledge_base: KnowledgeBase,
    documents: Sequence[int] | np.ndarray | None = None,
    using: str | None = None,
) -> tuple[list[int], list[list[str]], list[int]]:
    """The ids, stored token lists and document ids of the knowledge base's searchable chunks
    (of ``documents`` only, when given), as a build reads them (inside the caller's snapshot,
    if any), from database ``using`` (default: the primary)."""
    packed = Func(
        Func(F("tokens"), Value(_SEPARATOR), function="array_to_string"),
        Value("UTF8"),
        function="convert_to",
        output_field=BinaryField(),
    )
    chunks = _ready_chunks(knowledge_base, using)
    if documents is not None:
        chunks = chunks.filter(document_id__in=[int(d) for d in documents])
    rows = chunks.annotate(
        n_tokens=Func(F("tokens"), function="cardinality", output_field=IntegerField()),
        packed=packed,
    ).values_list("id", "n_tokens", "packed", "document_id")
    terms = _Terms()
    term_of = terms.__getitem__
    separator = _SEPARATOR.encode()
    ids: list[int] = []
    corpus: list[list[str]] = []
    groups: list[int] = []
    irregular: dict[int, int] = {}  # chunk id -> position in corpus
    for chunk_id, n_tokens, data, document_id in rows.iterator(chunk_size=_FETCH_ROWS):
        tokens = list(map(term_of, bytes(data).split(separator))) if data else []
        if len(tokens) != (n_tokens or 0):
            irregular[chunk_id] = len(corpus)
        ids.append(chunk_id)
        corpus.append(tokens)
        groups.append(document_id)
    if irregular:
        arrays = _ready_chunks(knowledge_base, using).filter(id__in=list(irregular))
        for chunk_id, tokens in arrays.values_list("id", "tokens"):
            corpus[irregular[chunk_id]] = [t for t in tokens if t is not None]
    return ids, corpus, groups
