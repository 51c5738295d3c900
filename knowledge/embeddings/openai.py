"""The ``openai`` provider: any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint
(OpenAI, Azure OpenAI, Ollama, vLLM, TEI, LiteLLM...).

Batches inputs, retries 429 and 5xx answers and timeouts with exponential backoff (honouring
``Retry-After``), and checks the shape of every answer: a provider returning garbage fails the
document with a message instead of storing wrong vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from knowledge.embeddings.http_retry import RetriesExhausted, post_with_retries

from .base import EmbeddingConfig, EmbeddingError

MAX_BACKOFF_S = 20.0


class OpenAIEmbedder:
    provider = "openai"

    def __init__(self, config: EmbeddingConfig, client: httpx.Client | None = None) -> None:
        if not config.base_url:
            raise EmbeddingError("EMBEDDING_BASE_URL is not set for the openai provider")
        if not config.model:
            raise EmbeddingError("EMBEDDING_MODEL is not set for the openai provider")
        self.config = config
        self.model = config.model
        self.dimensions = config.dimensions or 0  # learnt from the first answer when unset
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = client or httpx.Client(
            base_url=config.base_url.rstrip("/"), headers=headers, timeout=config.timeout_s
        )

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        size = max(1, self.config.batch_size)
        for start in range(0, len(texts), size):
            vectors.extend(self._request(list(texts[start : start + size])))
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._request([text])[0]

    def _request(self, batch: list[str]) -> list[list[float]]:
        # Empty strings are rejected by some servers; a space embeds as "nothing".
        payload: dict = {"model": self.model, "input": [text or " " for text in batch]}
        if self.config.dimensions:
            payload["dimensions"] = self.config.dimensions
        try:
            response = post_with_retries(
                self._client,
                "/embeddings",
                payload,
                attempts=self.config.max_retries + 1,
                backoff_s=self.config.backoff_s,
                max_delay_s=MAX_BACKOFF_S,
                timeout_s=self.config.timeout_s,
                what="embedding API",
            )
        except RetriesExhausted as exc:
            raise EmbeddingError(
                f"the embedding API {exc}; "
                "check EMBEDDING_BASE_URL and the provider's status, then reprocess"
            ) from None
        if response.status_code != 200:
            raise EmbeddingError(
                f"the embedding API answered {response.status_code}: {response.text[:300]}"
            )
        return self._parse(response, len(batch))

    def _parse(self, response: httpx.Response, expected: int) -> list[list[float]]:
        try:
            data = response.json()["data"]
            items = sorted(data, key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in items]
        except (ValueError, KeyError, TypeError) as exc:
            raise EmbeddingError(
                f"the embedding API returned an unexpected answer ({type(exc).__name__})"
            ) from exc
        if len(vectors) != expected:
            raise EmbeddingError(
                f"the embedding API returned {len(vectors)} vectors for {expected} inputs"
            )
        lengths = {len(v) for v in vectors}
        if len(lengths) != 1 or 0 in lengths:
            raise EmbeddingError("the embedding API returned vectors of inconsistent length")
        (length,) = lengths
        if self.dimensions and length != self.dimensions:
            raise EmbeddingError(
                f"the embedding API returned {length}-dimensional vectors; "
                f"this knowledge base uses {self.dimensions}"
            )
        self.dimensions = length
        return vectors
