"""The ``http`` provider: a rerank API over HTTP, in one of three request styles.

``cohere``  ``POST {base_url}/rerank`` with ``{"model", "query", "documents", "top_n",
            "return_documents": false}``, answered ``{"results": [{"index", "relevance_score"}]}``.
            Cohere v1 and v2 (base URL ``https://api.cohere.com/v1`` or ``/v2``; v2 requires the
            model) and servers that copy it (vLLM, LiteLLM, Infinity, OpenVINO Model Server).
``jina``    the same request and answer at ``https://api.jina.ai/v1/rerank``.
``tei``     Hugging Face text-embeddings-inference: ``POST {base_url}/rerank`` with ``{"query",
            "texts", "raw_scores": false, "truncate": true}``, answered ``[{"index", "score"}]``.
            ``raw_scores: false`` makes TEI apply the model's activation (a sigmoid for one-label
            rerankers); ``truncate`` cuts chunks longer than the model's window instead of failing.

Answers come sorted by score; they are mapped back to input order by ``index`` and checked (each
index exactly once, each score a finite number): a garbled answer is a RerankError, never a wrong
score. Timeouts, 408, 409, 425, 429 and 5xx are retried with exponential backoff, honouring
Retry-After (knowledge.embeddings.http_retry); other 4xx are not retried.

Batches: TEI refuses more texts per request than its ``--max-client-batch-size`` (default 32; 413
above it), so it gets 32; Cohere recommends at most 1,000 documents per request, and Jina, which
documents no limit, gets the same. A cross-encoder scores each pair on its own, so scores from
different batches compare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import httpx

from knowledge.embeddings.http_retry import RetriesExhausted, post_with_retries

from .base import API_STYLES, RerankConfig, RerankError

BATCH_LIMITS = {"cohere": 1000, "jina": 1000, "tei": 32}
# A search waits for its rerank; a Retry-After longer than this is not worth honouring in full.
MAX_BACKOFF_S = 5.0


class HttpReranker:
    def __init__(self, config: RerankConfig, client: httpx.Client | None = None) -> None:
        if config.api_style not in API_STYLES:
            raise RerankError(
                f"unknown RERANK_API_STYLE {config.api_style!r}; choose one of "
                f"{', '.join(API_STYLES)}"
            )
        if not config.base_url.startswith(("http://", "https://")):
            raise RerankError(
                f"RERANK_BASE_URL {config.base_url!r} is not an http(s) URL; set it to the API's "
                "base, e.g. https://api.cohere.com/v2, https://api.jina.ai/v1 or a TEI server's "
                "http://host:port (the reranker posts to {base}/rerank)"
            )
        if config.api_style != "tei" and not config.model:
            raise RerankError(
                f"RERANK_MODEL is not set; the {config.api_style} rerank API needs a model name "
                "(e.g. rerank-v3.5, jina-reranker-v2-base-multilingual)"
            )
        self.config = config
        self.style = config.api_style
        self.name = f"http:{self.style}:{config.model or config.base_url}"
        self._batch_size = max(1, config.batch_size or BATCH_LIMITS[self.style])
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = client or httpx.Client(
            base_url=config.base_url.rstrip("/"), headers=headers, timeout=config.timeout_s
        )

    def rerank(self, query: str, documents: Sequence[str]) -> list[float]:
        documents = list(documents)
        scores: list[float] = []
        for start in range(0, len(documents), self._batch_size):
            batch = documents[start : start + self._batch_size]
            response = self._post(self._payload(query, batch), len(batch))
            scores.extend(self._parse(response, len(batch)))
        return scores

    def _payload(self, query: str, batch: list[str]) -> dict:
        if self.style == "tei":
            return {"query": query, "texts": batch, "raw_scores": False, "truncate": True}
        return {
            "model": self.config.model,
            "query": query,
            "documents": batch,
            "top_n": len(batch),
            "return_documents": False,
        }

    def _post(self, payload: dict, size: int) -> httpx.Response:
        try:
            response = post_with_retries(
                self._client,
                "/rerank",
                payload,
                attempts=self.config.max_retries + 1,
                backoff_s=self.config.backoff_s,
                max_delay_s=MAX_BACKOFF_S,
                timeout_s=self.config.timeout_s,
                what=f"rerank API {self.name}",
            )
        except RetriesExhausted as exc:
            raise RerankError(
                f"the rerank API at {self.config.base_url} {exc}; "
                "check RERANK_BASE_URL and the provider's status"
            ) from None
        if not 200 <= response.status_code < 300:
            raise RerankError(self._refusal(response, size))
        return response

    def _refusal(self, response: httpx.Response, size: int) -> str:
        status = response.status_code
        body = response.text[:300]
        if status in (401, 403):
            hint = "check RERANK_API_KEY"
        elif status == 404:
            hint = f"check RERANK_BASE_URL (posted to {response.request.url})"
        elif status == 413 and self.style == "tei":
            hint = (
                f"the TEI server refuses {size} texts per request; start it with "
                f"--max-client-batch-size {BATCH_LIMITS['tei']} or more"
            )
        else:
            hint = "check RERANK_MODEL and RERANK_API_STYLE"
        return f"the rerank API answered {status}: {body}; {hint}"

    def _parse(self, response: httpx.Response, expected: int) -> list[float]:
        try:
            data = response.json()
        except ValueError:
            raise self._garbage("not JSON") from None
        if self.style == "tei":
            items = data
        else:
            items = data.get("results") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise self._garbage("no list of results")
        score_key = "score" if self.style == "tei" else "relevance_score"
        scores: list[float | None] = [None] * expected
        for item in items:
            if not isinstance(item, dict):
                raise self._garbage(f"a result that is not an object: {item!r}"[:120])
            index, score = item.get("index"), item.get(score_key)
            if type(index) is not int or not 0 <= index < expected:
                raise self._garbage(f"index {index!r} for {expected} documents")
            if isinstance(score, bool) or not isinstance(score, int | float):
                raise self._garbage(f"{score_key} {score!r} at index {index}")
            if not math.isfinite(score):
                raise self._garbage(f"{score_key} {score!r} at index {index}")
            if scores[index] is not None:
                raise self._garbage(f"index {index} twice")
            scores[index] = float(score)
        filled = [score for score in scores if score is not None]
        if len(filled) != expected:
            raise self._garbage(f"{len(items)} results for {expected} documents")
        return filled

    def _garbage(self, detail: str) -> RerankError:
        return RerankError(
            f"the rerank API returned an unexpected answer ({detail}); check that "
            f"RERANK_API_STYLE={self.style} matches the server at {self.config.base_url}"
        )
