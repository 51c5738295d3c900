"""Reading a knowledge base's stored tokens into segments for a build (never re-analysed).

Each chunk's tokens arrive as one UTF-8 ``bytea`` (joined with a separator the analyser never
emits), split as bytes and mapped straight to the segment's term ids: no per-token Python
beyond one dict lookup. A row whose split does not give ``cardinality(tokens)`` tokens is read
again as an array. A reader thread fetches rows from a server-side cursor and a builder thread
inverts each segment once cut, while the calling thread maps tokens.

Reads run inside the caller's transaction on database ``using``; the reader thread uses that
connection while the caller leaves it alone.
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
from django.db.models import BinaryField, F, Func, IntegerField, QuerySet, Value
from django.db.models.sql.constants import MULTI

from knowledge.models import Chunk, KnowledgeBase
from knowledge.selectors import SEARCHABLE_CHUNK
from retrieval.bm25.segment import MAX_SEGMENT_TOKENS, Segment, TermIds

# The analyser's normalisation removes C0 controls, so no stored token holds this one.
_SEPARATOR = "\x1f"
_FETCH_ROWS = 5000
_QUEUED_BATCHES = 4  # batches the reader may run ahead


def ready_chunks(knowledge_base: KnowledgeBase, using: str | None = None) -> QuerySet:
    """The knowledge base's searchable chunks, on database ``using`` (default: the primary)."""
    return (
        Chunk.objects.db_manager(using)
        .filter(
            SEARCHABLE_CHUNK,  # curation: the one definition of searchable
            tenant_id=knowledge_base.tenant_id,
            knowledge_base_id=knowledge_base.pk,
        )
        .order_by()
    )


def _packed_rows(
    knowledge_base: KnowledgeBase, documents: Sequence[int] | np.ndarray | None, using: str | None
) -> QuerySet:
    """(chunk id, token count, tokens joined as bytes, document id) of the searchable chunks
    (of ``documents`` only, when given)."""
    packed = Func(
        Func(F("tokens"), Value(_SEPARATOR), function="array_to_string"),
        Value("UTF8"),
        function="convert_to",
        output_field=BinaryField(),
    )
    chunks = ready_chunks(knowledge_base, using)
    if documents is not None:
        chunks = chunks.filter(document_id__in=[int(d) for d in documents])
    return chunks.annotate(
        n_tokens=Func(F("tokens"), function="cardinality", output_field=IntegerField()),
        packed=packed,
    ).values_list("id", "n_tokens", "packed", "document_id")


def _arrays(
    knowledge_base: KnowledgeBase, chunk_ids: Sequence[int], using: str | None
) -> dict[int, list[str]]:
    """The token arrays of these chunks, NULL elements left out."""
    if not chunk_ids:
        return {}
    rows = ready_chunks(knowledge_base, using).filter(id__in=list(chunk_ids))
    return {
        chunk_id: [t for t in tokens if t is not None]
        for chunk_id, tokens in rows.values_list("id", "tokens")
    }


class _Part:
    """The chunks of one segment being read, their tokens as term ids of its own vocabulary."""

    def __init__(self) -> None:
        self.ids = array("q")
        self.groups = array("q")
        self.lengths = array("q")
        self.term_ids = array("i")
        self.vocab = TermIds()
        self.tokens = 0  # as counted by the database, irregular rows included
        self.irregular: list[tuple[int, int]] = []  # (chunk id, document id), tokens to come

    def add_tokens(self, chunk_id: int, document_id: int, tokens: list[bytes]) -> None:
        self.ids.append(chunk_id)
        self.groups.append(document_id)
        self.lengths.append(len(tokens))
        self.term_ids.extend(map(self.vocab.__getitem__, tokens))

    def build(self) -> Segment:
        terms = [term.decode() for term in self.vocab]
        return Segment.from_term_ids(
            np.array(self.ids, dtype=np.int64),
            np.frombuffer(self.term_ids, dtype=np.int32),  # copied to int64 by the inversion
            np.array(self.lengths, dtype=np.int64),
            terms,
            np.array(self.groups, dtype=np.int64),
        )


def fetch_segments(
    knowledge_base: KnowledgeBase,
    documents: Sequence[int] | np.ndarray | None = None,
    using: str | None = None,
    max_tokens: int = MAX_SEGMENT_TOKENS,
) -> list[Segment]:
    """The knowledge base's searchable chunks (of ``documents`` only, when given) as segments
    of at most ``max_tokens`` tokens each (a longer single chunk gets one of its own), from
    database ``using``."""
    if max_tokens < 1:
        raise ValueError("a segment must be allowed at least one token")
    separator = _SEPARATOR.encode()
    # Per segment, in order: its build under way, or its part while irregular rows wait.
    segments: list[Future[Segment] | _Part] = []
    part = _Part()
    with ThreadPoolExecutor(1, thread_name_prefix="bm25-build") as builder:

        def cut(part: _Part) -> None:
            segments.append(part if part.irregular else builder.submit(part.build))

        with _batches(_packed_rows(knowledge_base, documents, using)) as batches:
            for batch in batches:
                for chunk_id, n_tokens, data, document_id in batch:
                    n_tokens = n_tokens or 0
                    if part.tokens and part.tokens + n_tokens > max_tokens:
                        cut(part)
                        part = _Part()
                    part.tokens += n_tokens
                    tokens = bytes(data).split(separator) if data else []
                    if len(tokens) == n_tokens:
                        part.add_tokens(chunk_id, document_id, tokens)
                    else:
                        part.irregular.append((chunk_id, document_id))
        if part.tokens or part.ids or part.irregular:
            cut(part)
        late = [s for s in segments if isinstance(s, _Part)]
        arrays = _arrays(knowledge_base, [c for p in late for c, _ in p.irregular], using)
        for position, waiting in enumerate(segments):
            if isinstance(waiting, _Part):
                for chunk_id, document_id in waiting.irregular:
                    tokens = [t.encode() for t in arrays.get(chunk_id, [])]
                    waiting.add_tokens(chunk_id, document_id, tokens)
                segments[position] = builder.submit(waiting.build)
        return [future.result() for future in segments]


@contextmanager
def _batches(rows: QuerySet) -> Iterator[Iterator[list[tuple]]]:
    """Batches of the query's rows, up to ``_QUEUED_BATCHES`` read ahead by a thread of their own
    from a server-side cursor; an error while reading is raised in the caller's thread."""
    compiler = rows.query.get_compiler(using=rows.db)
    # Executed here, in the caller's thread and transaction; fetched and closed in the reader's.
    results = iter(compiler.execute_sql(MULTI, chunked_fetch=True, chunk_size=_FETCH_ROWS))
    with ThreadPoolExecutor(1, thread_name_prefix="bm25-fetch") as reader:
        ahead = deque(reader.submit(next, results, None) for _ in range(_QUEUED_BATCHES))

        def consume() -> Iterator[list[tuple]]:
            while (batch := ahead.popleft().result()) is not None:
                ahead.append(reader.submit(next, results, None))
                yield batch

        try:
            yield consume()
        finally:
            for pending in ahead:
                pending.cancel()
            if hasattr(results, "close"):  # closes the server-side cursor
                reader.submit(results.close).result()
