from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    """BM25 index and store, vector leg, fusion, RAGService, search API, LangChain integration."""

    name = "retrieval"
    verbose_name = "Retrieval"

    def ready(self) -> None:
        from retrieval import signals  # noqa: F401 - connects the BM25Store receivers
