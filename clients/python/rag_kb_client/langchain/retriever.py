"""``RemoteKnowledgeBaseRetriever``: the server's hybrid search as a LangChain retriever, over
the REST API (``rag_kb_client.Client``), in any process.

    retriever = RemoteKnowledgeBaseRetriever(
        base_url="https://rag.example.com", api_key="rag_...", knowledge_base_id=3, k=5
    )
    retriever.invoke("How is the pump sealed?", mode="keyword")

Every search option can be set on the retriever or per call. Failures raise the exceptions of
``rag_kb_client.errors`` (all ``ApiError``), after the client's retries.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, SecretStr, model_validator

from rag_kb_client.client import AsyncClient, Client
from rag_kb_client.langchain.documents import hit_to_document
from rag_kb_client.types import SearchMode, SearchResult


class RemoteKnowledgeBaseRetriever(BaseRetriever):
    """Hybrid search over one or several knowledge bases. Give ``knowledge_base_id=`` for one,
    ``knowledge_base_ids=`` for several. ``None`` options take the knowledge base's default;
    ``k`` is LangChain's name for ``top_k``."""

    base_url: str
    api_key: SecretStr
    timeout: float = Field(default=30.0, gt=0)
    """Seconds for connecting, and for each read of the answer."""
    max_retries: int = Field(default=2, ge=0)
    explain: bool = True
    """Ask for the whole trace (``metadata["trace"]``)."""

    knowledge_base_ids: list[int] = Field(min_length=1)
    k: int | None = Field(default=None, ge=1)
    mode: SearchMode | None = None
    vector_weight: float | None = Field(default=None, ge=0)
    keyword_weight: float | None = Field(default=None, ge=0)
    score_threshold: float | None = None
    filters: dict[str, Any] | None = None
    """``{"metadata": {"project": "apollo"}, "document_ids": [...], "max_age_days": 30,
    "created_after": ..., "created_before": ..., "exclude_chunk_ids": [...]}``."""
    rerank: bool | None = None
    rerank_top_n: int | None = Field(default=None, ge=1)
    candidate_multiplier: int | None = Field(default=None, ge=1)
    """Each leg fetches ``k x candidate_multiplier`` candidates before fusion."""
    use_rerank: bool | None = None
    """Not the cross-encoder (``rerank``): true fuses both legs over 3x candidates, false
    returns the vector leg's results only."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    """A misspelt option is an error, not a default silently kept; errors do not echo the
    arguments (an API key among them)."""

    option_names: ClassVar[tuple[str, ...]] = (
        "k",
        "mode",
        "vector_weight",
        "keyword_weight",
        "score_threshold",
        "filters",
        "rerank",
        "rerank_top_n",
        "candidate_multiplier",
        "use_rerank",
    )

    @model_validator(mode="before")
    @classmethod
    def _aliases(cls, values: Any) -> Any:
        """``knowledge_base_id=`` for one knowledge base; ``top_k=`` for ``k``."""
        if not isinstance(values, dict):
            return values
        values = _k_for_top_k(values, ValueError)
        if "knowledge_base_id" in values:
            if "knowledge_base_ids" in values:
                raise ValueError("give knowledge_base_id or knowledge_base_ids, not both")
            values["knowledge_base_ids"] = [values.pop("knowledge_base_id")]
        return values

    def search_options(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The options of one search: the fields overridden by the call's keywords, ``k`` as
        ``top_k``, unset ones left out. Raises TypeError for an unknown option.
        ``top_k`` (the REST API's name) is taken for ``k``."""
        overrides = _k_for_top_k(overrides, TypeError)
        unknown = set(overrides) - set(self.option_names)
        if unknown:
            raise TypeError(f"unknown search options: {', '.join(sorted(unknown))}")
        values = {name: getattr(self, name) for name in self.option_names} | dict(overrides)
        values["top_k"] = values.pop("k")
        return {name: value for name, value in values.items() if value is not None}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        with Client(**self._connection()) as client:
            return _documents(client.search(query, **self._request(overrides)))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        async with AsyncClient(**self._connection()) as client:
            return _documents(await client.search(query, **self._request(overrides)))

    def _connection(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "api_key": self.api_key.get_secret_value(),
            "timeout": self.timeout,
            "max_retries": self.max_retries,
        }

    def _request(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        return {
            **self.search_options(overrides),
            "knowledge_base_ids": list(self.knowledge_base_ids),
            "explain": self.explain,
        }


def _k_for_top_k(options: Mapping[str, Any], error: type[Exception]) -> dict[str, Any]:
    """``options`` with ``top_k`` renamed ``k``; both at once raise ``error``."""
    options = dict(options)
    if "top_k" in options:
        if "k" in options:
            raise error("give k or top_k (the same option), not both")
        options["k"] = options.pop("top_k")
    return options


def _documents(result: SearchResult) -> list[Document]:
    return [hit_to_document(hit, result.trace) for hit in result.results]
