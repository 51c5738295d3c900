"""An API key says whether it is restricted to some knowledge bases (``restricted``), so a key
whose restriction rows are all gone uses no knowledge base instead of every one. Keys that have
restriction rows are restricted; the others keep every knowledge base of their tenant. (The rows
are in ``knowledge_apikey_knowledge_bases``, which ``knowledge.0001_initial`` created before
``tenancy.0001_initial``; it is read by its name, as this app does not know ``knowledge``.)"""

from django.db import migrations, models

MARK_RESTRICTED = """
UPDATE knowledge_apikey SET restricted = true
WHERE id IN (SELECT apikey_id FROM knowledge_apikey_knowledge_bases)
"""


class Migration(migrations.Migration):
    dependencies = [("tenancy", "0001_initial")]

    operations = [
        migrations.AddField(
            model_name="apikey",
            name="restricted",
            field=models.BooleanField(default=False),
        ),
        migrations.RunSQL(MARK_RESTRICTED, reverse_sql=migrations.RunSQL.noop),
    ]
