"""The ``openai`` provider: any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint
(OpenAI, Azure OpenAI, Ollama, vLLM, TEI, LiteLLM...).

Batches inputs, retries 429 and 5xx answers and timeouts with exponential backoff (honouring
``Retry-After``), and checks the shape of every answer: a provider returning garbage fails the
document with a message instead of storing wrong vectors.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import httpx

from .base import EmbeddingConfig, EmbeddingError

logger = logging.getLogger(__name__)

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
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
        attempts = self.config.max_retries + 1
        last_problem = ""
        for attempt in range(attempts):
            try:
                response = self._client.post("/embeddings", json=payload)
            except httpx.TimeoutException:
                last_problem = f"timed out after {self.config.timeout_s:g} s"
            except httpx.TransportError as exc:
                last_problem = f"could not connect ({exc})"
            else:
                if response.status_code == 200:
                    return self._parse(response, len(batch))
                if response.status_code not in RETRYABLE_STATUS:
                    raise EmbeddingError(
                        f"the embedding API answered {response.status_code}: {response.text[:300]}"
                    )
                last_problem = f"answered {response.status_code}"
                retry_after = _retry_after(response)
                if retry_after is not None and attempt + 1 < attempts:
                    time.sleep(min(retry_after, MAX_BACKOFF_S))
                    continue
            if attempt + 1 < attempts:
                delay = min(self.config.backoff_s * (2**attempt), MAX_BACKOFF_S)
                logger.warning(
                    "embedding API %s; retry %d in %.1fs", last_problem, attempt + 1, delay
                )
                time.sleep(delay)
        raise EmbeddingError(
            f"the embedding API {last_problem}, {attempts} attempts; "
            "check EMBEDDING_BASE_URL and the provider's status, then reprocess"
        )

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


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
