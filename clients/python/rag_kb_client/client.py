"""``Client`` and ``AsyncClient``: the knowledge-base REST API with typed results.

    with Client("https://rag.example.com", api_key="rag_...") as client:
        result = client.search("How is the pump sealed?", knowledge_base_id=3, top_k=5)
        prompt_context = format_context(result.hits)

Failures raise ``rag_kb_client.errors`` exceptions with the API's message; transient ones are
retried first (``rag_kb_client._http`` says which and how).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from pydantic import ValidationError

from rag_kb_client import _http
from rag_kb_client.types import Context, KnowledgeBase, SearchMode, SearchResult

T = TypeVar("T")
PAGE = 500  # the API's largest page of a list


class _Options:
    """Keyword options of a search, as the API names them (None: the knowledge base's)."""

    @staticmethod
    def of(
        top_k: int | None = None,
        mode: SearchMode | str | None = None,
        vector_weight: float | None = None,
        keyword_weight: float | None = None,
        score_threshold: float | None = None,
        filters: dict[str, Any] | None = None,
        rerank: bool | None = None,
        rerank_top_n: int | None = None,
        candidate_multiplier: int | None = None,
        use_rerank: bool | None = None,
        explain: bool | None = None,
        max_chars: int | None = None,
    ) -> dict[str, Any]:
        return dict(locals())


class _Base:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 30.0,
        max_retries: int = 2,
    ) -> None:
        if timeout <= 0 or max_retries < 0:
            raise ValueError("timeout must be > 0 and max_retries >= 0")
        self.base_url, self.timeout, self.max_retries = base_url, timeout, max_retries
        self._root = _http.root_url(base_url)
        self._headers = _http.headers(api_key)

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.base_url!r})"

    def _search_request(
        self,
        query: str,
        knowledge_base_id: int | None,
        knowledge_base_ids: list[int] | None,
        options: dict[str, Any],
        endpoint: str,
    ) -> tuple[str, dict[str, Any]]:
        ids = _http.knowledge_base_ids(knowledge_base_id, knowledge_base_ids)
        return _http.search_request(query, ids, _Options.of(**options), endpoint)

    def _parse(self, response: httpx.Response, where: str, parse: Callable[[Any], T]) -> T:
        try:
            return parse(response.json())
        except (ValueError, KeyError, TypeError, ValidationError) as exc:
            raise _http.unexpected(response, where, exc) from exc


class Client(_Base):
    """The REST API over one ``httpx.Client`` (keep-alive); close it, or use ``with``."""

    def __init__(self, base_url: str, api_key: str, **options: Any) -> None:
        super().__init__(base_url, api_key, **options)
        self._http = httpx.Client(timeout=self.timeout, headers=self._headers)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def list_knowledge_bases(self) -> list[KnowledgeBase]:
        """Every knowledge base this key may read, by id."""
        found: list[KnowledgeBase] = []
        while True:
            page = self._call("GET", "/knowledge-bases", _page, params=_offset(len(found)))
            found += page[0]
            if page[1] is None:
                return found

    def get_knowledge_base(self, knowledge_base_id: int) -> KnowledgeBase:
        return self._call(
            "GET", f"/knowledge-bases/{knowledge_base_id}", KnowledgeBase.model_validate
        )

    def search(
        self,
        query: str,
        knowledge_base_id: int | None = None,
        *,
        knowledge_base_ids: list[int] | None = None,
        **options: Any,
    ) -> SearchResult:
        """Hybrid search over one knowledge base or several (fused into one ranking). Options:
        top_k, mode, vector_weight, keyword_weight, score_threshold, filters, rerank,
        rerank_top_n, candidate_multiplier, use_rerank, explain."""
        path, body = self._search_request(
            query, knowledge_base_id, knowledge_base_ids, options, "search"
        )
        return self._call("POST", path, SearchResult.model_validate, json=body)

    def context(
        self,
        query: str,
        knowledge_base_id: int | None = None,
        *,
        knowledge_base_ids: list[int] | None = None,
        **options: Any,
    ) -> Context:
        """The same search, with the hits formatted by the server for a prompt (``context``,
        within ``max_chars``, 6000 by default)."""
        path, body = self._search_request(
            query, knowledge_base_id, knowledge_base_ids, options, "context"
        )
        return self._call("POST", path, Context.model_validate, json=body)

    def _call(self, method: str, path: str, parse: Callable[[Any], T], **request: Any) -> T:
        url = self._root + path
        where = f"{method} {url}"
        for attempt in range(self.max_retries + 1):
            try:
                response = self._http.request(method, url, **request)
            except httpx.TransportError as exc:
                error = _http.transport_error(exc, method, url, self.timeout)
            else:
                if response.status_code == 200:
                    return self._parse(response, where, parse)
                error = _http.status_error(response, where)
            if not _http.should_retry(error, attempt, self.max_retries, method):
                raise error
            time.sleep(_http.delay(error, attempt))
        raise AssertionError("unreachable")  # pragma: no cover


class AsyncClient(_Base):
    """``Client`` for asyncio: the same methods, awaited; close it, or use ``async with``."""

    def __init__(self, base_url: str, api_key: str, **options: Any) -> None:
        super().__init__(base_url, api_key, **options)
        self._http = httpx.AsyncClient(timeout=self.timeout, headers=self._headers)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def list_knowledge_bases(self) -> list[KnowledgeBase]:
        found: list[KnowledgeBase] = []
        while True:
            page = await self._call("GET", "/knowledge-bases", _page, params=_offset(len(found)))
            found += page[0]
            if page[1] is None:
                return found

    async def get_knowledge_base(self, knowledge_base_id: int) -> KnowledgeBase:
        return await self._call(
            "GET", f"/knowledge-bases/{knowledge_base_id}", KnowledgeBase.model_validate
        )

    async def search(
        self,
        query: str,
        knowledge_base_id: int | None = None,
        *,
        knowledge_base_ids: list[int] | None = None,
        **options: Any,
    ) -> SearchResult:
        path, body = self._search_request(
            query, knowledge_base_id, knowledge_base_ids, options, "search"
        )
        return await self._call("POST", path, SearchResult.model_validate, json=body)

    async def context(
        self,
        query: str,
        knowledge_base_id: int | None = None,
        *,
        knowledge_base_ids: list[int] | None = None,
        **options: Any,
    ) -> Context:
        path, body = self._search_request(
            query, knowledge_base_id, knowledge_base_ids, options, "context"
        )
        return await self._call("POST", path, Context.model_validate, json=body)

    async def _call(self, method: str, path: str, parse: Callable[[Any], T], **request: Any) -> T:
        url = self._root + path
        where = f"{method} {url}"
        for attempt in range(self.max_retries + 1):
            try:
                response = await self._http.request(method, url, **request)
            except httpx.TransportError as exc:
                error = _http.transport_error(exc, method, url, self.timeout)
            else:
                if response.status_code == 200:
                    return self._parse(response, where, parse)
                error = _http.status_error(response, where)
            if not _http.should_retry(error, attempt, self.max_retries, method):
                raise error
            await asyncio.sleep(_http.delay(error, attempt))
        raise AssertionError("unreachable")  # pragma: no cover


def _offset(offset: int) -> dict[str, int]:
    return {"limit": PAGE, "offset": offset}


def _page(body: dict[str, Any]) -> tuple[list[KnowledgeBase], str | None]:
    return [KnowledgeBase.model_validate(kb) for kb in body["results"]], body.get("next")
