"""Hybrid search as LangChain retrievers, in the process that holds the database.

- ``KnowledgeBaseRetriever``: ``RAGService.search`` over one or several knowledge bases of a
  tenant, with every option of the search; see ``retrieval.langchain.documents`` for what each
  returned document carries.
- ``get_retriever(service, knowledge_base_id, **options)``: the same search as a LangChain
  ``VectorStoreRetriever`` (``search_type="hybrid"``) over ``KnowledgeBaseVectorStore``, for
  code that expects one (``retriever.vectorstore``, ``search_type="mmr"``...). It is what
  ``RAGService.get_retriever`` returns.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from pydantic import field_validator

from retrieval.langchain.documents import hit_to_document
from retrieval.langchain.options import BaseKnowledgeBaseRetriever
from retrieval.langchain.vectorstore import (
    KnowledgeBaseVectorStore,
    KnowledgeBaseVectorStoreRetriever,
)
from retrieval.search import RAGService
from retrieval.search.types import SearchFilters, SearchOptions
from tenancy.models import Tenant


class KnowledgeBaseRetriever(BaseKnowledgeBaseRetriever):
    """``KnowledgeBaseRetriever(tenant=tenant, knowledge_base_id=3, k=5, mode="hybrid")``.

    Options: k, mode, vector_weight, keyword_weight, score_threshold, filters (a SearchFilters,
    or a dict in the REST API's shape: ``SearchFilters.from_dict``), rerank, rerank_top_n,
    candidate_multiplier; unset ones are the knowledge base's defaults. A knowledge base of
    another tenant raises KnowledgeBaseNotFound, exactly as a missing one does; a bad option
    raises InvalidSearch.
    """

    tenant: Tenant
    filters: SearchFilters | dict[str, Any] | None = None

    @field_validator("filters", mode="after")
    @classmethod
    def _search_filters(cls, value: SearchFilters | dict | None) -> SearchFilters | None:
        return value if value is None else SearchFilters.from_dict(value)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        return self._search(query, overrides)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **overrides: Any
    ) -> list[Document]:
        return await sync_to_async(self._search, thread_sensitive=True)(query, overrides)

    def _search(self, query: str, overrides: dict[str, Any]) -> list[Document]:
        options = self.search_options(overrides)  # a filters dict is settled by the search
        result = RAGService(self.tenant).search_multiple_knowledge_bases(
            query, self.knowledge_base_ids, **options
        )
        trace = result.trace.to_dict()
        return [
            hit_to_document(hit.to_dict(), trace, rank)
            for rank, hit in enumerate(result.hits, start=1)
        ]


def get_retriever(
    service: RAGService,
    knowledge_base_id: int,
    *,
    search_type: str = "hybrid",
    embedding: Embeddings | None = None,
    **options: Any,
) -> KnowledgeBaseVectorStoreRetriever:
    """A ``VectorStoreRetriever`` over one knowledge base of the service's tenant. By default
    it runs ``service.search`` with ``options`` (``k`` or ``top_k``, mode, weights, filters,
    score_threshold, rerank...); ``search_type`` "similarity", "mmr" or
    "similarity_score_threshold" run the plain vector searches of LangChain instead."""
    if search_type == "hybrid":
        unknown = set(options) - set(SearchOptions.__dataclass_fields__) - {"k"}
        if unknown:
            raise TypeError(f"unknown search options: {', '.join(sorted(unknown))}")
    store = KnowledgeBaseVectorStore(service.tenant, knowledge_base_id, embedding, service=service)
    return store.as_retriever(search_type=search_type, search_kwargs=options)


RAGService.register_retriever_factory(get_retriever)
