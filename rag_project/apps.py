from django.apps import AppConfig
from django.conf import settings

from rag_project import embedded, heap, lifecycle


class CoreConfig(AppConfig):
    """Project-wide plumbing: embedded services, health check, API infrastructure."""

    name = "rag_project"
    label = "rag_project"
    verbose_name = "RAG project"

    def ready(self) -> None:
        lifecycle.process_started.connect(heap.on_process_started, dispatch_uid="rag_project.heap")
        # Every Django process (web, Celery worker, management command, test worker) needs the
        # broker and cache, so the embedded Redis is made sure of here, once per process; it is
        # a PING when the server already runs. PostgreSQL starts lazily on first connection.
        if settings.REDIS_EMBEDDED:
            embedded.ensure_redis(settings.RAG_DATA_DIR)
