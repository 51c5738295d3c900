"""Creating, changing and deleting knowledge bases, and the version every change bumps."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from knowledge.embeddings import EmbeddingConfig, default_config
from knowledge.embeddings.registry import resolved
from knowledge.models import KnowledgeBase
from knowledge.signals import knowledge_base_changed
from tenancy.models import Tenant


def create_knowledge_base(
    *,
    tenant: Tenant,
    name: str,
    description: str = "",
    embedding: EmbeddingConfig | None = None,
    **settings,
) -> KnowledgeBase:
    """Create a knowledge base recording its embedding provider, model and dimension: the
    deployment default unless ``embedding`` says otherwise. ``settings`` are model fields
    (chunk_size, chunk_overlap, user_words, weights, top_k, ...)."""
    config = resolved(embedding) if embedding is not None else default_config()
    kb = KnowledgeBase(
        tenant=tenant,
        name=name,
        description=description,
        embedding_provider=config.provider,
        embedding_model=config.model,
        embedding_dimensions=config.dimensions,
        **settings,
    )
    kb.full_clean()
    kb.save()
    return kb


def bump_index_version(knowledge_base: KnowledgeBase) -> int:
    """Increase the knowledge base's ``index_version`` inside the current transaction and send
    ``knowledge_base_changed``. Call it in the same transaction as the change itself."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("bump the index version inside the transaction of the change")
    KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(index_version=F("index_version") + 1)
    version = KnowledgeBase.objects.values_list("index_version", flat=True).get(
        pk=knowledge_base.pk
    )
    knowledge_base.index_version = version
    knowledge_base_changed.send(
        sender=KnowledgeBase,
        knowledge_base_id=knowledge_base.pk,
        tenant_id=knowledge_base.tenant_id,
        index_version=version,
    )
    return version
