"""A covering index of the searchable documents' stamps: every process reads them after each
change to bring its views up to date (``retrieval.core.stamps``, ``retrieval.bm25store.build``),
as an index-only scan instead of a scan of every document row. Built concurrently, so a
deployment keeps writing documents while it is made."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("knowledge", "0013_chunk_document_position"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="document",
            index=models.Index(
                condition=models.Q(("enabled", True), ("status", "ready")),
                fields=["tenant", "knowledge_base", "id"],
                include=("processed_at", "analyzer_version", "chunk_count"),
                name="document_searchable_stamps",
            ),
        ),
    ]
