"""Which knowledge base an index or a matrix belongs to, in which life of the database."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from knowledge.models import KnowledgeBase

_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Identity:
    """Which knowledge base an entry belongs to. ``epoch`` (its creation time in microseconds)
    tells apart two KBs that had the same id in two lives of a database (a test database made
    afresh, a database recreated in development) while Redis kept the older one's entries."""

    tenant_id: int
    knowledge_base_id: int
    epoch: int


def identity_of(knowledge_base: KnowledgeBase) -> Identity:
    epoch = (knowledge_base.created_at - _UNIX_EPOCH) // timedelta(microseconds=1)
    return Identity(knowledge_base.tenant_id, knowledge_base.pk, epoch)


def knowledge_base_slot(identity: Identity) -> int:
    """The slot of a knowledge base's entries in a ``ByteLRU`` holding one per knowledge base:
    its id, so that an entry of another life of the same id is dropped on sight."""
    return identity.knowledge_base_id
