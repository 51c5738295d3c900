"""Signals ``knowledge`` sends so ``retrieval`` can react without ``knowledge`` importing it."""

from django.dispatch import Signal

# Sent inside the transaction that changed a knowledge base's documents, right after its
# index_version was bumped. Keyword arguments: knowledge_base_id, tenant_id, index_version.
# Receivers that queue work must do it with transaction.on_commit.
knowledge_base_changed = Signal()
