from django.apps import AppConfig


class RetrievalConfig(AppConfig):
    """Search: BM25 index and store, vector leg, fusion, rerank, calibration, RAGService, the
    search API, LangChain integration, admin hit testing."""

    name = "retrieval"
    verbose_name = "Retrieval"

    def ready(self) -> None:
        from retrieval import (
            signals,  # noqa: F401 - connects the receivers of knowledge changes
            warmup,  # noqa: F401 - warms serving processes at start-up
        )
        from retrieval.langchain import retriever  # noqa: F401 - registers get_retriever
