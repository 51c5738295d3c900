"""Building a knowledge base's index from the tokens stored at ingestion (never re-analysed).

Only searchable chunks are indexed (``knowledge.selectors.SEARCHABLE_CHUNK``: enabled chunks of
ready, enabled documents). The KB's ``index_version`` is read first and in the same REPEATABLE
READ snapshot as the chunks, so the version an index is labelled with is exactly the data it
holds. (Called inside a caller's transaction, the snapshot is that transaction's; the version
is still read first, and a label older than the content is safe: readers of the newer version
reject it and rebuild.)

Fetching is the expensive half at 100k chunks: turning 12M array elements into Python strings
costs more than building the index. So PostgreSQL joins each chunk's tokens into one UTF-8
``bytea`` (with a separator the analyser never emits), Python splits bytes (no decoding per
token), and one dict maps each distinct term's bytes to a single ``str``: 12M tokens become
pointers to ~50k strings, which also makes the build's own dict lookups faster. A row whose
split does not give ``cardinality(tokens)`` tokens (a token holding the separator, or an empty
or NULL element) is fetched again as an array.

Builds read the database the search reads (``retrieval.replica.search_reads``: the primary
outside a search, so the warm-up after a change never meets a lagging replica).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

from django.db import connections, transaction
from django.db.models import BinaryField, F, Func, IntegerField, Value

from knowledge.models import Chunk, KnowledgeBase
from knowledge.selectors import SEARCHABLE_CHUNK
from retrieval.bm25 import BM25Index
from retrieval.replica import search_reads

# The analyser's normalisation removes C0 controls, so no stored token holds this one.
_SEPARATOR = "\x1f"
_FETCH_ROWS = 5000


@dataclass(frozen=True)
class BuiltIndex:
    index: BM25Index
    version: int
    chunk_count: int
    seconds: float


class _Terms(dict):
    """bytes -> the one ``str`` of that term; decodes each distinct term once."""

    def __missing__(self, key: bytes) -> str:
        term = self[key] = key.decode()
        return term


def build_from_database(knowledge_base: KnowledgeBase) -> BuiltIndex:
    """Build the index of the KB's ready chunks, labelled with the version it reflects.
    Raises KnowledgeBase.DoesNotExist if the KB is gone."""
    started = time.perf_counter()
    alias = search_reads()
    with snapshot(using=alias):
        version = (
            KnowledgeBase.objects.using(alias)
            .filter(pk=knowledge_base.pk, tenant_id=knowledge_base.tenant_id)
            .values_list("index_version", flat=True)
            .first()
        )
        if version is None:
            raise KnowledgeBase.DoesNotExist(f"knowledge base {knowledge_base.pk} is gone")
        ids, corpus = fetch_tokens(knowledge_base, using=alias)
    index = BM25Index.build(ids, corpus)
    return BuiltIndex(index, version, len(ids), time.perf_counter() - started)


@contextmanager
def snapshot(using: str | None = None):
    """A REPEATABLE READ, read-only transaction on database ``using`` (default: the primary),
    or the caller's own there, if one is open."""
    connection = connections[using or "default"]
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
    knowledge_base: KnowledgeBase, using: str | None = None
) -> tuple[list[int], list[list[str]]]:
    """The ids (ascending) and stored token lists of the knowledge base's chunks of ready
    documents, as a build reads them (inside the caller's snapshot, if any), from database
    ``using`` (default: the primary)."""
    packed = Func(
        Func(F("tokens"), Value(_SEPARATOR), function="array_to_string"),
        Value("UTF8"),
        function="convert_to",
        output_field=BinaryField(),
    )
    rows = (
        _ready_chunks(knowledge_base, using)
        .annotate(
            n_tokens=Func(F("tokens"), function="cardinality", output_field=IntegerField()),
            packed=packed,
        )
        .values_list("id", "n_tokens", "packed")
    )
    terms = _Terms()
    term_of = terms.__getitem__
    separator = _SEPARATOR.encode()
    ids: list[int] = []
    corpus: list[list[str]] = []
    irregular: dict[int, int] = {}  # chunk id -> position in corpus
    for chunk_id, n_tokens, data in rows.iterator(chunk_size=_FETCH_ROWS):
        tokens = list(map(term_of, bytes(data).split(separator))) if data else []
        if len(tokens) != (n_tokens or 0):
            irregular[chunk_id] = len(corpus)
        ids.append(chunk_id)
        corpus.append(tokens)
    if irregular:
        arrays = _ready_chunks(knowledge_base, using).filter(id__in=list(irregular))
        for chunk_id, tokens in arrays.values_list("id", "tokens"):
            corpus[irregular[chunk_id]] = [t for t in tokens if t is not None]
    return ids, corpus
