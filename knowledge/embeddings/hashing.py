"""The ``hash`` provider: feature hashing of analysed tokens into a fixed-length unit vector.

Deterministic and dependency-free, so tests and development get real vectors without a model.
It is NOT semantic: two texts are similar only as far as they share tokens. Never use it for a
real knowledge base.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from knowledge.analysis import get_analyzer

DEFAULT_DIMENSIONS = 384


class HashEmbedder:
    provider = "hash"

    def __init__(self, dimensions: int | None = None) -> None:
        self.dimensions = dimensions or DEFAULT_DIMENSIONS
        self.model = f"hash-{self.dimensions}"
        self._analyzer = get_analyzer()

    def _vector(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        for token in self._analyzer.tokens(text):
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            sign = 1.0 if value & 1 else -1.0
            vector[(value >> 1) % self.dimensions] += sign
        norm = math.sqrt(sum(v * v for v in vector))
        if norm == 0.0:
            # An empty text still needs a valid vector; a fixed unit vector keeps cosine defined.
            vector[0] = 1.0
            return vector
        return [v / norm for v in vector]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)
