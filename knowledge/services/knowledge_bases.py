"""Knowledge-base writes: create one, change its settings, domain words and embedding model,
delete it with everything it holds; and the version every change to its searchable chunks bumps.

Retrieval settings (weights, top_k, threshold, rerank...) are read by every search from the
row, so a change applies to the next search. Chunking settings apply to documents processed
after the change (reprocess a document to re-chunk it). Domain words re-analyse the stored
chunks and a new embedding model re-embeds them, both in the background: the change is
recorded here, in its transaction, and the work is ``knowledge.services.reindex``'s.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from knowledge.embeddings import EmbeddingConfig, default_config
from knowledge.embeddings.registry import resolved
from knowledge.models import Document, KnowledgeBase, StagedEmbedding
from knowledge.signals import knowledge_base_changed
from rag_project.celery import enqueue
from tenancy.errors import ensure_tenant
from tenancy.models import ApiKey, Tenant

logger = logging.getLogger(__name__)

# What a person sets on a knowledge base, in the order forms and the API show it. user_words
# re-analyses the chunks, so update_knowledge_base takes it apart from SETTINGS_FIELDS.
EDITABLE_FIELDS = (
    "name",
    "description",
    "chunk_size",
    "chunk_overlap",
    "user_words",
    "embedding_scripts",
    "weight_mode",
    "vector_weight",
    "keyword_weight",
    "top_k",
    "candidate_multiplier",
    "score_threshold",
    "rerank_enabled",
    "rerank_top_n",
)
SETTINGS_FIELDS = tuple(f for f in EDITABLE_FIELDS if f != "user_words")


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


def update_knowledge_base(
    *,
    tenant: Tenant,
    knowledge_base: KnowledgeBase,
    changes: dict[str, Any],
    user_words: list[str] | None = None,
    embedding: EmbeddingConfig | None = None,
) -> KnowledgeBase:
    """Apply ``changes`` (fields of SETTINGS_FIELDS) in one transaction, validated as a whole.

    Giving ``vector_weight`` or ``keyword_weight`` without ``weight_mode`` pins the weights
    (``weight_mode`` becomes ``fixed``): weights set by hand are meant to be used, and a
    calibrated knowledge base would otherwise go on using its measured ones.
    """
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    unknown = set(changes) - set(SETTINGS_FIELDS)
    if unknown:
        raise TypeError(f"not settings of a knowledge base: {', '.join(sorted(unknown))}")
    changes = dict(changes)
    if {"vector_weight", "keyword_weight"} & set(changes) and "weight_mode" not in changes:
        changes["weight_mode"] = KnowledgeBase.WeightMode.FIXED
    with transaction.atomic():
        kb = KnowledgeBase.objects.select_for_update().get(pk=knowledge_base.pk, tenant=tenant)
        for field, value in changes.items():
            setattr(kb, field, value)
        kb.full_clean()
        if changes:
            kb.save(update_fields=[*changes, "updated_at"])
        if user_words is not None and _cleaned(user_words) != sorted(kb.user_words):
            set_user_words(tenant=tenant, knowledge_base=kb, words=user_words)
        if embedding is not None:
            change_embedding(tenant=tenant, knowledge_base=kb, config=embedding)
    kb.refresh_from_db()
    return kb


def set_user_words(*, tenant: Tenant, knowledge_base: KnowledgeBase, words: list[str]) -> None:
    """Change a knowledge base's domain words; its chunks are re-analysed in the background.
    Its ready documents are marked for re-analysis (``analyzer_version`` 0) in the same
    transaction, so the periodic sweep re-analyses them even if the task is never queued."""
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    cleaned = _cleaned(words)
    with transaction.atomic():
        KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(user_words=cleaned)
        Document.objects.filter(knowledge_base=knowledge_base, status=Document.Status.READY).update(
            analyzer_version=0
        )
        knowledge_base.user_words = cleaned
        enqueue("knowledge.reanalyze_knowledge_base", knowledge_base.pk)


def change_embedding(
    *, tenant: Tenant, knowledge_base: KnowledgeBase, config: EmbeddingConfig
) -> dict:
    """Start moving a knowledge base to another embedding model. The target is checked now
    (a provider that cannot load is refused here, not halfway); the work runs in the
    background and search keeps the old vectors until the switch."""
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    target = resolved(config)
    migration = {
        "provider": target.provider,
        "model": target.model,
        "dimensions": target.dimensions,
        "started_at": timezone.now().isoformat(),
        "updated_at": timezone.now().isoformat(),
        "done": 0,
    }
    with transaction.atomic():
        KnowledgeBase.objects.filter(pk=knowledge_base.pk).update(embedding_migration=migration)
        StagedEmbedding.objects.filter(knowledge_base=knowledge_base).delete()
        knowledge_base.embedding_migration = migration
        enqueue("knowledge.reembed_knowledge_base", knowledge_base.pk)
    return migration


def delete_knowledge_base(*, tenant: Tenant, knowledge_base: KnowledgeBase) -> None:
    """Delete a knowledge base with its documents, chunks and BM25 index row; its stored files
    go after the commit. (``retrieval`` drops the cached index tiers on the same commit: its
    post_delete receiver calls ``get_store().invalidate``.)

    API keys whose restriction this knowledge base was the last of are revoked with it. Such a
    key is restricted to nothing either way (``ApiKey.restricted``: it may use no knowledge
    base); revoked, it answers 401, which says so.
    """
    ensure_tenant(knowledge_base, tenant, "knowledge base")
    storage = Document._meta.get_field("file").storage
    with transaction.atomic():
        kb = KnowledgeBase.objects.select_for_update().get(pk=knowledge_base.pk, tenant=tenant)
        names = [
            name
            for name in Document.objects.filter(knowledge_base=kb).values_list("file", flat=True)
            if name
        ]
        _revoke_keys_left_without(kb)
        kb.delete()
        transaction.on_commit(lambda: _delete_files(storage, names))


def _revoke_keys_left_without(kb: KnowledgeBase) -> None:
    """Revoke the live keys restricted to ``kb`` and to no other knowledge base.

    The keys' rows are locked first (in id order, so two deletions never wait on each other
    in a cycle), then their other restrictions are counted: a deletion of another of a key's
    knowledge bases running meanwhile waits for this one's commit, and then counts without the
    restriction this one removed. Without the lock, two deletions of a key's two knowledge
    bases at once would each count the other's restriction, and neither would revoke it."""
    locked = list(
        ApiKey.objects.select_for_update(of=("self",))
        .filter(knowledge_bases=kb, revoked_at__isnull=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    if not locked:
        return
    restrictions = KnowledgeBase.restricted_api_keys.through.objects
    kept = restrictions.filter(apikey_id__in=locked).exclude(knowledgebase_id=kb.pk)
    orphaned = set(locked) - set(kept.values_list("apikey_id", flat=True))
    ApiKey.objects.filter(pk__in=orphaned).update(revoked_at=timezone.now())


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


def _cleaned(words: list[str]) -> list[str]:
    return sorted({w.strip() for w in words if w and w.strip()})


def _delete_files(storage, names: list[str]) -> None:
    for name in names:
        try:
            storage.delete(name)
        except OSError as exc:  # a missing or unreadable file must not undo the deletion
            logger.warning("could not delete stored file %s: %s", name, exc)
