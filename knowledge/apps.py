from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    """Tenants, knowledge bases, documents and chunks, and ingestion (parse, chunk, analyse,
    embed, store)."""

    name = "knowledge"
    verbose_name = "Knowledge"
