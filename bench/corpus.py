"""Synthetic knowledge bases for the search benchmarks, written straight into PostgreSQL.

Filling 300k chunks through the ingestion pipeline would take longer than the measurements, so
chunk rows are generated and written with binary COPY, but they hold exactly what ingestion
would have stored for their text:

- The vocabulary mixes pseudo-English words (consonant-vowel syllables) with two-character
  words from jieba's own dictionary (about one word in four), and keeps only words that the
  real analyser turns into exactly one token. A chunk's ``content`` is its words joined by
  spaces, so ``tokens`` (the analyser's output for that content) is known without running the
  analyser per chunk, and a query made of a chunk's words analyses to the same tokens.
- Word frequencies follow Zipf's law (exponent 1) over the vocabulary, chunk lengths a gamma
  distribution around ``MEAN_WORDS``, everything from one seeded numpy Generator.
- Embeddings are, by default, the ``hash`` provider's (``knowledge/embeddings/hashing.py``) for that
  content, computed in bulk with numpy: each token's bucket and sign come from the same
  blake2b digest, then one scatter-add and normalisation per batch. They are equal to what
  ``HashEmbedder.embed_documents`` returns (checked by ``check_embeddings``), so the query
  vectors that the real embedder computes at search time meet them as they would in production.
  ``fill(..., vectors=...)`` writes vectors drawn by ``bench.realistic`` instead (the structure
  of real embeddings; the words and tokens are the same either way).

Documents are created ``ready`` with 20 chunks each.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
from django.db import connection, transaction
from django.utils import timezone
from psycopg.types.json import Jsonb

from knowledge.analysis import ANALYZER_VERSION, get_analyzer
from knowledge.embeddings.hashing import HashEmbedder
from knowledge.models import Document, KnowledgeBase

DIMENSIONS = 384
MEAN_WORDS = 100
CHUNKS_PER_DOCUMENT = 20
BATCH = 5000
_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"
_CHINESE_SHARE = 0.25


@dataclass
class Vocabulary:
    """Words, the one token each analyses to, and that token's hash bucket and sign."""

    words: np.ndarray  # object array of str
    tokens: np.ndarray  # object array of str
    buckets: np.ndarray  # int64
    signs: np.ndarray  # float32, +1 or -1
    cdf: np.ndarray  # Zipf cumulative distribution over the words

    @classmethod
    def build(cls, size: int = 50_000, seed: int = 11) -> Vocabulary:
        rng = np.random.default_rng(seed)
        analyzer = get_analyzer()
        words: list[str] = []
        tokens: list[str] = []
        seen: set[str] = set()
        for word in _candidates(size, rng):
            analysed = analyzer.tokens(word)
            if len(analysed) == 1 and analysed[0] not in seen and analysed[0] != "null":
                seen.add(analysed[0])
                words.append(word)
                tokens.append(analysed[0])
            if len(words) == size:
                break
        order = rng.permutation(len(words))  # Chinese and English words at every rank
        words_arr = np.array(words, dtype=object)[order]
        tokens_arr = np.array(tokens, dtype=object)[order]
        buckets, signs = _hash_features(tokens_arr.tolist(), DIMENSIONS)
        weights = 1.0 / np.arange(1, len(words) + 1, dtype=np.float64)
        cdf = np.cumsum(weights)
        cdf /= cdf[-1]
        return cls(words_arr, tokens_arr, buckets, signs, cdf)

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        ranks = np.searchsorted(self.cdf, rng.random(count), side="right")
        return np.minimum(ranks, len(self.words) - 1)

    @cached_property
    def token_lists(self) -> list[str]:
        return self.tokens.tolist()


def _candidates(size: int, rng: np.random.Generator) -> Iterator[str]:
    """Pseudo-English words and jieba dictionary words, interleaved, more than needed."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    english = (
        "".join(parts) + tail
        for length in (2, 3, 4)
        for parts in itertools.product(syllables, repeat=length)
        for tail in ("", "n")
    )
    chinese = iter(_jieba_words(int(size * _CHINESE_SHARE * 1.5), rng))
    for i in itertools.count():
        source = chinese if i % 4 == 3 else english
        word = next(source, None)
        if word is None:
            source = english
            word = next(source)
        yield word


def _jieba_words(count: int, rng: np.random.Generator) -> list[str]:
    from knowledge.analysis.chinese import load_jieba

    jieba = load_jieba()
    if jieba is None:
        return []
    jieba.dt.check_initialized()
    pool = sorted(w for w, f in jieba.dt.FREQ.items() if f > 0 and len(w) == 2 and w.isalpha())
    picks = rng.choice(len(pool), size=min(count, len(pool)), replace=False)
    return [pool[i] for i in sorted(picks.tolist())]


def _hash_features(tokens: list[str], dimensions: int) -> tuple[np.ndarray, np.ndarray]:
    """HashEmbedder's bucket and sign of each token (same digest, same arithmetic)."""
    values = [
        int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
        for t in tokens
    ]
    buckets = np.array([(v >> 1) % dimensions for v in values], dtype=np.int64)
    signs = np.array([1.0 if v & 1 else -1.0 for v in values], dtype=np.float32)
    return buckets, signs


def embed_batch(vocab: Vocabulary, lengths: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Hash embeddings of a batch of chunks given as (lengths, concatenated word ranks)."""
    rows = np.repeat(np.arange(len(lengths)), lengths)
    matrix = np.zeros((len(lengths), DIMENSIONS), dtype=np.float64)
    np.add.at(matrix, (rows, vocab.buckets[ranks]), vocab.signs[ranks])
    norms = np.linalg.norm(matrix, axis=1)
    empty = norms == 0
    matrix[empty, 0] = 1.0
    norms[empty] = 1.0
    return (matrix / norms[:, None]).astype(np.float32)


def check_embeddings(vocab: Vocabulary, samples: int = 5, seed: int = 3) -> float:
    """Largest difference between bulk embeddings and HashEmbedder's, over a few chunks."""
    rng = np.random.default_rng(seed)
    lengths = np.full(samples, MEAN_WORDS)
    ranks = vocab.draw(rng, int(lengths.sum()))
    bulk = embed_batch(vocab, lengths, ranks)
    embedder = HashEmbedder(DIMENSIONS)
    texts = [
        " ".join(vocab.words[ranks[i * MEAN_WORDS : (i + 1) * MEAN_WORDS]]) for i in range(samples)
    ]
    reference = np.array(embedder.embed_documents(texts), dtype=np.float32)
    return float(np.abs(bulk - reference).max())


@dataclass
class Target:
    """One knowledge base to fill: how many chunks it gets, and its documents."""

    knowledge_base: KnowledgeBase
    chunks: int
    filled: int = 0
    document_ids: list[int] | None = None
    sample_vectors: list[np.ndarray] = field(default_factory=list)  # of the sampled chunks


def create_documents(target: Target) -> None:
    kb = target.knowledge_base
    count = -(-target.chunks // CHUNKS_PER_DOCUMENT)
    now = timezone.now()
    documents = [
        Document(
            tenant_id=kb.tenant_id,
            knowledge_base=kb,
            title=f"Synthetic document {i}",
            original_filename=f"synthetic-{i}.txt",
            file="",
            file_type="txt",
            sha256=hashlib.sha256(f"{kb.pk}:{i}".encode()).hexdigest(),
            status=Document.Status.READY,
            progress=100,
            chunk_count=min(CHUNKS_PER_DOCUMENT, target.chunks - i * CHUNKS_PER_DOCUMENT),
            analyzer_version=ANALYZER_VERSION,
            processed_at=now,
        )
        for i in range(count)
    ]
    created = Document.objects.bulk_create(documents, batch_size=2000)
    target.document_ids = [d.pk for d in created]


_COLUMNS = (
    "tenant_id, knowledge_base_id, document_id, position, content, tokens, analyzer_version, "
    "embedding, embedding_model, embedding_dimensions, start_char, end_char, page, "
    "heading_path, metadata, created_at"
)
_TYPES = [
    "int8", "int8", "int8", "int4", "text", "text[]", "int2",
    "vector", "varchar", "int4", "int4", "int4", "int4",
    "text[]", "jsonb", "timestamptz",
]  # fmt: skip


VectorSource = Callable[[np.random.Generator, int], np.ndarray]


def fill(
    targets: list[Target], vocab: Vocabulary, seed: int = 7, vectors: VectorSource | None = None
) -> dict[int, list[list[int]]]:
    """Write every target's chunks, interleaved batch by batch (as uploads to several knowledge
    bases would be). Returns, per knowledge base, the word ranks of its first chunks (enough to
    draw queries from); their vectors go to each target's ``sample_vectors``. ``vectors(rng,
    n)`` draws n chunk vectors in place of the text's hash embeddings (from a Generator of its
    own, so the text is the same either way)."""
    from pgvector.psycopg import register_vector

    rng = np.random.default_rng(seed)
    vector_rng = np.random.default_rng([seed, 3])
    connection.ensure_connection()
    raw = connection.connection
    register_vector(raw)
    samples: dict[int, list[list[int]]] = {t.knowledge_base.pk: [] for t in targets}
    now = timezone.now()
    empty_metadata = Jsonb({})
    words = vocab.words
    token_of = vocab.token_lists
    with transaction.atomic():
        while any(t.filled < t.chunks for t in targets):
            for target in targets:
                size = min(BATCH, target.chunks - target.filled)
                if size <= 0:
                    continue
                lengths = np.maximum(
                    3, np.rint(rng.gamma(4.0, MEAN_WORDS / 4.0, size=size))
                ).astype(np.int64)
                ranks = vocab.draw(rng, int(lengths.sum()))
                batch_vectors = (
                    embed_batch(vocab, lengths, ranks)
                    if vectors is None
                    else vectors(vector_rng, size)
                )
                ends = np.cumsum(lengths).tolist()
                starts = [0, *ends[:-1]]
                flat_words = words[ranks].tolist()
                flat_ranks = ranks.tolist()
                kb = target.knowledge_base
                sample = samples[kb.pk]
                with (
                    raw.cursor() as cursor,
                    cursor.copy(
                        f"COPY knowledge_chunk ({_COLUMNS}) FROM STDIN (FORMAT BINARY)"
                    ) as copy,
                ):
                    copy.set_types(_TYPES)
                    for i in range(size):
                        n = target.filled + i
                        chunk_ranks = flat_ranks[starts[i] : ends[i]]
                        content = " ".join(flat_words[starts[i] : ends[i]])
                        if len(sample) < 2000:
                            sample.append(chunk_ranks)
                            target.sample_vectors.append(batch_vectors[i])
                        copy.write_row(
                            (
                                kb.tenant_id,
                                kb.pk,
                                target.document_ids[n // CHUNKS_PER_DOCUMENT],
                                n % CHUNKS_PER_DOCUMENT,
                                content,
                                [token_of[r] for r in chunk_ranks],
                                ANALYZER_VERSION,
                                batch_vectors[i],
                                kb.embedding_model,
                                DIMENSIONS,
                                0,
                                len(content),
                                None,
                                [],
                                empty_metadata,
                                now,
                            )
                        )
                target.filled += size
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE knowledge_chunk")
        cursor.execute("ANALYZE knowledge_document")
    return samples
