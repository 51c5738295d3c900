"""An index on a chunk's document: finding a document's chunks (deleting or reprocessing it,
the BM25 and vector deltas after a change) scanned every chunk of its knowledge base without
it: about a second per document at 300k chunks (``bench churn``). Built concurrently, so a
deployment keeps writing chunks while it is made."""

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("knowledge", "0012_document_dispatch"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="chunk",
            index=models.Index(fields=["document", "position"], name="chunk_document_position"),
        ),
    ]
