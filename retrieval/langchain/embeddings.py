"""LangChain ``Embeddings`` and this project's embedding providers, each usable as the other.

- ``ProviderEmbeddings``: one of our providers (``hash``, ``local``, ``openai``...) as a LangChain
  Embeddings, e.g. a knowledge base's own model for LangChain code:
  ``ProviderEmbeddings.for_knowledge_base(kb)``.
- ``LangChainEmbedder``: a LangChain Embeddings as our ``Embedder`` (provider ``langchain``).
  ``register_langchain_embeddings(embeddings)`` makes it a provider in this process and returns
  the ``EmbeddingConfig`` to create a knowledge base with.
- ``query_embeddings(kb, given)``: the Embeddings that embed a knowledge base's queries here.

A LangChain Embeddings is an object of the caller's process, so a knowledge base using one is
embedded only where it is registered: ``KnowledgeBaseVectorStore`` ingests in that process, and
anywhere else (the web server, a worker) its searches fall back to keyword-only and say so in
the trace. A model is known by its name: the class's import path, plus its ``model`` /
``model_name`` when it has one; vectors of another name or dimension are never compared.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from langchain_core.embeddings import Embeddings

from knowledge.embeddings import (
    Embedder,
    EmbeddingConfig,
    EmbeddingError,
    ProviderUnavailable,
    config_for_knowledge_base,
    get_embedder,
    register_embedder,
)
from knowledge.models import KnowledgeBase

PROVIDER = KnowledgeBase.EmbeddingProvider.LANGCHAIN.value
_PROBE = "dimension probe"


def model_name(embeddings: Embeddings) -> str:
    """The name a knowledge base records for a LangChain Embeddings."""
    cls = type(embeddings)
    name = f"{cls.__module__}.{cls.__qualname__}"
    for attribute in ("model", "model_name", "model_id"):
        value = getattr(embeddings, attribute, None)
        if isinstance(value, str) and value:
            return f"{name}:{value}"
    return name


class LangChainEmbedder:
    """A LangChain Embeddings behind our ``Embedder`` interface. Failures of the wrapped object
    become EmbeddingErrors, which ingestion reports on the document and search falls back on."""

    provider = PROVIDER

    def __init__(
        self, embeddings: Embeddings, *, name: str | None = None, dimensions: int | None = None
    ) -> None:
        self.embeddings = embeddings
        self.model = name or model_name(embeddings)
        self.dimensions = dimensions or len(self._call(embeddings.embed_query, _PROBE))
        self._batch = threading.local()

    @contextmanager
    def batch(self, texts: Sequence[str]) -> Iterator[None]:
        """Embed ``texts`` in one call now; within the block, this thread's requests for any of
        them reuse those vectors. Ingestion embeds document by document: a batch of texts added
        together costs one call to the embeddings instead of one per text."""
        unique = list(dict.fromkeys(texts))
        self._batch.vectors = dict(zip(unique, self._embed(unique), strict=True)) if unique else {}
        try:
            yield
        finally:
            self._batch.vectors = {}

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        ready = getattr(self._batch, "vectors", {})
        missing = list(dict.fromkeys(text for text in texts if text not in ready))
        fresh = dict(zip(missing, self._embed(missing), strict=True)) if missing else {}
        return [ready[text] if text in ready else fresh[text] for text in texts]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        vectors = self._call(self.embeddings.embed_documents, texts)
        if len(vectors) != len(texts):
            raise EmbeddingError(
                f"{self.model} returned {len(vectors)} vectors for {len(texts)} texts"
            )
        return [self._checked(vector) for vector in vectors]

    def embed_query(self, text: str) -> list[float]:
        return self._checked(self._call(self.embeddings.embed_query, text))

    def _call(self, method, argument):
        try:
            return method(argument)
        except Exception as exc:
            raise EmbeddingError(f"the LangChain embeddings {self.model} failed: {exc}") from exc

    def _checked(self, vector: Sequence[float]) -> list[float]:
        if len(vector) != self.dimensions:
            raise EmbeddingError(
                f"{self.model} returned a {len(vector)}-dimensional vector, "
                f"not {self.dimensions}-dimensional"
            )
        return [float(x) for x in vector]


def register_langchain_embeddings(
    embeddings: Embeddings, *, name: str | None = None, dimensions: int | None = None
) -> EmbeddingConfig:
    """Make a LangChain Embeddings the ``langchain`` provider of its name in this process.
    Without ``dimensions`` the embeddings are called once to measure them. Pass the result to
    ``create_knowledge_base(embedding=...)``."""
    return register_embedder(LangChainEmbedder(embeddings, name=name, dimensions=dimensions))


class ProviderEmbeddings(Embeddings):
    """One of our embedding providers as a LangChain Embeddings. The embedder is built on first
    use (a local model loads only then) and shared with ingestion and search in this process."""

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config

    @classmethod
    def for_knowledge_base(cls, knowledge_base: KnowledgeBase) -> ProviderEmbeddings:
        """The embeddings a knowledge base records (with the deployment's connection settings)."""
        return cls(config_for_knowledge_base(knowledge_base))

    @property
    def embedder(self) -> Embedder:
        embedder = get_embedder(self.config)
        if embedder is None:
            raise ValueError("the embedding provider 'none' makes no vectors")
        return embedder

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embedder.embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        return self.embedder.embed_query(text)

    def __repr__(self) -> str:
        return f"ProviderEmbeddings({self.config.provider!r}, {self.config.model!r})"


def query_embeddings(kb: KnowledgeBase, given: Embeddings | None = None) -> Embeddings | None:
    """The Embeddings that embed this knowledge base's queries here, registering ``given``
    as its provider when it is a LangChain one; refuses a model the knowledge base does not
    use, since its vectors would not be comparable."""
    if kb.embedding_provider == PROVIDER:
        config = config_for_knowledge_base(kb)
        try:
            registered = get_embedder(config)
        except ProviderUnavailable:
            registered = None
        current = getattr(registered, "embeddings", None)
        if given is None or given is current:
            return current or (ProviderEmbeddings(config) if registered else None)
        if model_name(given) != kb.embedding_model:
            raise ValueError(
                f"knowledge base {kb.pk} is embedded by {kb.embedding_model}, "
                f"not {model_name(given)}"
            )
        register_langchain_embeddings(
            given, name=kb.embedding_model, dimensions=kb.embedding_dimensions
        )
        return given
    if given is not None and not (
        isinstance(given, ProviderEmbeddings)
        and (given.config.provider, given.config.model)
        == (kb.embedding_provider, kb.embedding_model)
    ):
        raise ValueError(
            f"knowledge base {kb.pk} embeds with its own provider ({kb.embedding_provider}); "
            "leave embedding out to use it"
        )
    if kb.embedding_provider == KnowledgeBase.EmbeddingProvider.NONE:
        return None
    return ProviderEmbeddings.for_knowledge_base(kb)
