"""KnowledgeBaseVectorStore: one knowledge base of one tenant as a LangChain VectorStore.

- **Writes** go through the ingestion services (``retrieval.langchain.texts``): ``add_texts``
  returns once each text is a ready document, searchable by every entry point (this store,
  ``KnowledgeBaseRetriever``, ``RAGService``, the REST API).
- **Ids.** A text added with an id keeps it; one added without gets a UUID; a document
  uploaded otherwise (admin, API, ``ingest``) has its primary key as id, so ``"42"`` names
  document 42. Adding an id again replaces its document once the new one is ready; adding the
  same text and metadata again changes nothing.
- **Texts.** ``page_content`` is the chunk as ingestion stored it: line breaks as ``\\n``,
  control characters dropped, surrounding whitespace stripped. Knowledge bases this store
  creates use chunks of up to 20,000 characters, so a text comes back whole; a longer one (or
  a long uploaded document) is found chunk by chunk, each chunk carrying its document's id.
- **Metadata.** Exactly the metadata given (it must be JSON). Scores and citations are what
  ``search_type="hybrid"`` and ``KnowledgeBaseRetriever`` add.
- **Scores.** ``similarity_search_with_score`` gives cosine similarity, higher is better;
  relevance scores are the same, negatives counted as 0.
- **Tenant.** Everything is filtered by the store's tenant and knowledge base: another
  tenant's knowledge base cannot be opened, and its documents look missing.

Async methods run the sync ones with ``sync_to_async(thread_sensitive=True)``, as Django's
async ORM does.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, ClassVar

import numpy as np
from asgiref.sync import sync_to_async
from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import VectorStore, VectorStoreRetriever
from langchain_core.vectorstores.utils import maximal_marginal_relevance

from knowledge import selectors
from knowledge.embeddings import config_for_knowledge_base, get_embedder
from knowledge.ingestion.parsers.base import clean_text
from knowledge.models import Chunk, KnowledgeBase
from knowledge.services.knowledge_bases import create_knowledge_base
from retrieval.langchain.documents import hit_to_document, langchain_id, own_metadata
from retrieval.langchain.embeddings import (
    PROVIDER,
    LangChainEmbedder,
    ProviderEmbeddings,
    query_embeddings,
    register_langchain_embeddings,
)
from retrieval.langchain.texts import check_text, delete_texts, get_texts, put_text
from retrieval.search import KnowledgeBaseNotFound, RAGService
from retrieval.search.types import SearchFilters
from retrieval.vector.policy import nearest_chunks
from tenancy.models import Tenant

# Knowledge bases created by the store keep each text whole (LangChain callers split first).
STORE_CHUNK_SIZE = 20_000


class KnowledgeBaseVectorStore(VectorStore):
    """``KnowledgeBaseVectorStore(tenant, knowledge_base, embedding=None)``.

    ``embedding`` is the LangChain Embeddings of a knowledge base created with one (provider
    ``langchain``); leave it out for a knowledge base with its own provider (hash, local,
    openai), which then embeds queries too. ``from_texts(..., tenant=, name=)`` creates a new
    knowledge base embedded by the given Embeddings.
    """

    def __init__(
        self,
        tenant: Tenant,
        knowledge_base: KnowledgeBase | int,
        embedding: Embeddings | None = None,
        *,
        service: RAGService | None = None,
    ) -> None:
        if service is not None and service.tenant.pk != tenant.pk:
            raise ValueError("the RAGService belongs to another tenant")
        self.tenant = tenant
        self.knowledge_base_id = (
            knowledge_base.pk if isinstance(knowledge_base, KnowledgeBase) else int(knowledge_base)
        )
        self.service = service or RAGService(tenant)
        self._embedding = query_embeddings(self._knowledge_base(), embedding)

    @property
    def embeddings(self) -> Embeddings | None:
        return self._embedding

    # ------------------------------------------------------------------ writes

    def add_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        *,
        ids: list[str | None] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        """Ingest each text as one document; returns their ids. Everything is checked before
        anything is written; raises TextNotAdded if ingestion fails. Other keywords LangChain
        passes (the indexing API's ``batch_size``) change nothing here."""
        texts = list(texts)
        if metadatas is not None and len(metadatas) != len(texts):
            raise ValueError(f"{len(metadatas)} metadatas for {len(texts)} texts")
        if ids is not None and len(ids) != len(texts):
            raise ValueError(f"{len(ids)} ids for {len(texts)} texts")
        metadatas = [dict(m or {}) for m in metadatas] if metadatas else [{} for _ in texts]
        ids = [
            str(i) if i not in (None, "") else str(uuid.uuid4()) for i in ids or [None] * len(texts)
        ]
        for position, (text, metadata) in enumerate(zip(texts, metadatas, strict=True)):
            check_text(position, text, metadata)
        kb = self._knowledge_base()
        if self._embedding is None and kb.embedding_provider == PROVIDER:
            raise ValueError(self._no_embeddings(kb))
        with _one_embedding_call(kb, texts):
            for lc_id, text, metadata in zip(ids, texts, metadatas, strict=True):
                put_text(
                    tenant=self.tenant, knowledge_base=kb, lc_id=lc_id, text=text, metadata=metadata
                )
        return ids

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete the documents of these ids; unknown ids are ignored. Deleting everything
        (``ids=None``) is not offered here: delete the knowledge base instead."""
        if ids is None:
            raise ValueError("give the ids to delete")
        delete_texts(tenant=self.tenant, knowledge_base=self._knowledge_base(), ids=ids)
        return True

    # ------------------------------------------------------------------ reads

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The ready documents of these ids, whole, in the order asked; unknown ids skipped."""
        return get_texts(self.tenant, self._knowledge_base(), ids)

    def similarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return [doc for doc, _ in self.similarity_search_with_score(query, k, **kwargs)]

    def similarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        """Up to k (document, cosine similarity), most similar first. ``filter``: a metadata
        dict (a list value matches any of its items) or a SearchFilters."""
        vector = self._require_embeddings().embed_query(query)
        return self.similarity_search_with_score_by_vector(vector, k, **kwargs)

    def similarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        return [
            doc for doc, _ in self.similarity_search_with_score_by_vector(embedding, k, **kwargs)
        ]

    def similarity_search_with_score_by_vector(
        self, embedding: list[float], k: int = 4, filter: dict | SearchFilters | None = None
    ) -> list[tuple[Document, float]]:
        return [(doc, score) for doc, score, _ in self._nearest(embedding, k, filter)]

    def max_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[Document]:
        vector = self._require_embeddings().embed_query(query)
        return self.max_marginal_relevance_search_by_vector(
            vector, k, fetch_k, lambda_mult, **kwargs
        )

    def max_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        filter: dict | SearchFilters | None = None,
    ) -> list[Document]:
        found = self._nearest(embedding, max(k, fetch_k), filter, with_vectors=True)
        chosen = maximal_marginal_relevance(
            np.asarray(embedding, dtype=np.float64),
            [vector for _, _, vector in found],
            lambda_mult=lambda_mult,
            k=k,
        )
        return [found[i][0] for i in chosen]

    def hybrid_search(self, query: str, **options: Any) -> list[Document]:
        """``RAGService.search`` (``k`` or ``top_k``, mode, weights, filters, threshold, rerank),
        as documents carrying scores, citation fields and the trace in their metadata."""
        if "k" in options:
            options["top_k"] = options.pop("k")
        result = self.service.search(query, self.knowledge_base_id, **options)
        trace = result.trace.to_dict()
        return [
            hit_to_document(hit.to_dict(), trace, rank)
            for rank, hit in enumerate(result.hits, start=1)
        ]

    def search(self, query: str, search_type: str, **kwargs: Any) -> list[Document]:
        if search_type == "hybrid":
            return self.hybrid_search(query, **kwargs)
        return super().search(query, search_type, **kwargs)

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return _relevance

    def as_retriever(self, **kwargs: Any) -> KnowledgeBaseVectorStoreRetriever:
        tags = kwargs.pop("tags", None) or [*self._get_retriever_tags()]
        return KnowledgeBaseVectorStoreRetriever(vectorstore=self, tags=tags, **kwargs)

    @classmethod
    def from_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str | None] | None = None,
        tenant: Tenant,
        knowledge_base: KnowledgeBase | int | None = None,
        name: str | None = None,
        **settings: Any,
    ) -> KnowledgeBaseVectorStore:
        """Add texts to an existing knowledge base (``knowledge_base=``) or to a new one
        (``name=``, embedded by ``embedding``; ``settings`` are its fields, e.g. top_k)."""
        if knowledge_base is None:
            if not name:
                raise TypeError("from_texts needs knowledge_base= (existing) or name= (new)")
            if isinstance(embedding, ProviderEmbeddings):
                config = embedding.config
            else:
                config = register_langchain_embeddings(embedding)
            knowledge_base = create_knowledge_base(
                tenant=tenant,
                name=name,
                embedding=config,
                **{"chunk_size": STORE_CHUNK_SIZE, "chunk_overlap": 0, **settings},
            )
        elif settings or name:
            raise TypeError("name and settings are for a new knowledge base, not knowledge_base=")
        store = cls(tenant, knowledge_base, embedding)
        if texts:
            store.add_texts(texts, metadatas, ids=ids)
        return store

    # ------------------------------------------------------------------ async

    async def aadd_texts(
        self,
        texts: Iterable[str],
        metadatas: list[dict] | None = None,
        *,
        ids: list[str | None] | None = None,
        **kwargs: Any,
    ) -> list[str]:
        return await _sync(self.add_texts)(list(texts), metadatas, ids=ids, **kwargs)

    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        return await _sync(self.delete)(ids, **kwargs)

    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return await _sync(self.get_by_ids)(ids)

    async def asimilarity_search(self, query: str, k: int = 4, **kwargs: Any) -> list[Document]:
        return await _sync(self.similarity_search)(query, k, **kwargs)

    async def asimilarity_search_with_score(
        self, query: str, k: int = 4, **kwargs: Any
    ) -> list[tuple[Document, float]]:
        return await _sync(self.similarity_search_with_score)(query, k, **kwargs)

    async def asimilarity_search_by_vector(
        self, embedding: list[float], k: int = 4, **kwargs: Any
    ) -> list[Document]:
        return await _sync(self.similarity_search_by_vector)(embedding, k, **kwargs)

    async def amax_marginal_relevance_search(
        self,
        query: str,
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[Document]:
        return await _sync(self.max_marginal_relevance_search)(
            query, k, fetch_k, lambda_mult, **kwargs
        )

    async def amax_marginal_relevance_search_by_vector(
        self,
        embedding: list[float],
        k: int = 4,
        fetch_k: int = 20,
        lambda_mult: float = 0.5,
        **kwargs: Any,
    ) -> list[Document]:
        return await _sync(self.max_marginal_relevance_search_by_vector)(
            embedding, k, fetch_k, lambda_mult, **kwargs
        )

    async def ahybrid_search(self, query: str, **options: Any) -> list[Document]:
        return await _sync(self.hybrid_search)(query, **options)

    async def asearch(self, query: str, search_type: str, **kwargs: Any) -> list[Document]:
        if search_type == "hybrid":
            return await self.ahybrid_search(query, **kwargs)
        return await super().asearch(query, search_type, **kwargs)

    @classmethod
    async def afrom_texts(
        cls,
        texts: list[str],
        embedding: Embeddings,
        metadatas: list[dict] | None = None,
        *,
        ids: list[str | None] | None = None,
        **kwargs: Any,
    ) -> KnowledgeBaseVectorStore:
        return await _sync(cls.from_texts)(texts, embedding, metadatas, ids=ids, **kwargs)

    # ------------------------------------------------------------------ internals

    def _knowledge_base(self) -> KnowledgeBase:
        """Read afresh each time: its model can change, and it can be deleted."""
        try:
            return selectors.get_knowledge_base(self.tenant, self.knowledge_base_id)
        except KnowledgeBase.DoesNotExist:
            raise KnowledgeBaseNotFound(
                f"knowledge base {self.knowledge_base_id} not found"
            ) from None

    def _require_embeddings(self) -> Embeddings:
        if self._embedding is None:
            raise ValueError(self._no_embeddings(self._knowledge_base()))
        return self._embedding

    @staticmethod
    def _no_embeddings(kb: KnowledgeBase) -> str:
        if kb.embedding_provider == KnowledgeBase.EmbeddingProvider.NONE:
            return f"knowledge base {kb.pk} is keyword-only: use search_type='hybrid'"
        return (
            f"knowledge base {kb.pk} is embedded by the LangChain embeddings {kb.embedding_model}; "
            "pass them as this store's embedding"
        )

    def _nearest(
        self,
        vector: Sequence[float],
        k: int,
        filter: dict | SearchFilters | None = None,
        *,
        with_vectors: bool = False,
    ) -> list[tuple[Document, float, Any]]:
        """(document, similarity, chunk vector or None) of the k nearest ready chunks."""
        kb = self._knowledge_base()
        if k < 1 or not kb.embedding_dimensions:
            return []
        if len(vector) != kb.embedding_dimensions:
            raise ValueError(
                f"a {len(vector)}-dimensional vector for a knowledge base of "
                f"{kb.embedding_dimensions} dimensions"
            )
        filters = _filters(filter)
        fields = ["content", "document", "document__metadata"]
        if with_vectors:
            fields.append("embedding")
        limit = k
        while True:  # chunks of documents being reprocessed are skipped: ask for more
            pairs, _ = nearest_chunks(kb, vector, limit, filters)
            rows = (
                selectors.searchable_chunks(self.tenant, kb)
                .filter(pk__in=[chunk_id for chunk_id, _ in pairs])
                .select_related("document")
                .only(*fields)
                .in_bulk()
            )
            found = [(rows[chunk_id], score) for chunk_id, score in pairs if chunk_id in rows]
            if len(found) >= k or len(pairs) < limit:
                break
            limit *= 4
        return [
            (_chunk_document(row), score, row.embedding if with_vectors else None)
            for row, score in found[:k]
        ]


class KnowledgeBaseVectorStoreRetriever(VectorStoreRetriever):
    """A VectorStoreRetriever that also offers ``search_type="hybrid"``: ``RAGService.search``
    with ``search_kwargs`` as its options, documents carrying scores, citations and trace."""

    allowed_search_types: ClassVar[Collection[str]] = (
        *VectorStoreRetriever.allowed_search_types,
        "hybrid",
    )

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        if self.search_type == "hybrid":
            return self.vectorstore.hybrid_search(query, **(self.search_kwargs | kwargs))
        return super()._get_relevant_documents(query, run_manager=run_manager, **kwargs)

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, **kwargs: Any
    ) -> list[Document]:
        if self.search_type == "hybrid":
            return await self.vectorstore.ahybrid_search(query, **(self.search_kwargs | kwargs))
        return await super()._aget_relevant_documents(query, run_manager=run_manager, **kwargs)


# --------------------------------------------------------------------------- helpers


def _sync(method):
    return sync_to_async(method, thread_sensitive=True)


def _relevance(similarity: float) -> float:
    return max(0.0, min(1.0, similarity))


def _one_embedding_call(kb: KnowledgeBase, texts: list[str]) -> AbstractContextManager:
    """For a knowledge base embedded by a LangChain Embeddings, embed the texts as ingestion
    will see them (cleaned, stripped: each its one chunk) in one call up front."""
    if kb.embedding_provider != PROVIDER or len(texts) < 2:
        return nullcontext()
    embedder = get_embedder(config_for_knowledge_base(kb))
    if not isinstance(embedder, LangChainEmbedder):
        return nullcontext()
    return embedder.batch([clean_text(text).strip() for text in texts])


def _chunk_document(row: Chunk) -> Document:
    metadata = row.document.metadata
    return Document(
        id=langchain_id(metadata, row.document_id),
        page_content=row.content,
        metadata=own_metadata(metadata),
    )


def _filters(value: dict | SearchFilters | None) -> SearchFilters:
    """LangChain's ``filter`` is a metadata dict; a SearchFilters (or None) is taken as is."""
    if isinstance(value, dict):
        value = {"metadata": value}
    elif value is not None and not isinstance(value, SearchFilters):
        raise TypeError("filter must be a metadata dict or a SearchFilters")
    return SearchFilters.from_dict(value)
