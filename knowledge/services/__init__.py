"""Writes to the knowledge model. Views, commands and tasks call these; nothing else writes.

The services sit below ``knowledge.web`` and ``knowledge.tasks`` and import neither: tasks are
queued by name (``rag_project.celery.enqueue``), and what only the web layer can do (judge a
URL, fetch it) is handed in by the caller (``uploads.upload_documents``' judged URLs,
``processing.process_document``'s fetch step)."""
