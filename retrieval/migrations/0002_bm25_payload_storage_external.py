from django.db import migrations


class Migration(migrations.Migration):
    """The payload is zlib-compressed already: store it out of line without PostgreSQL trying
    to compress it again (which only slows every write)."""

    dependencies = [
        ("retrieval", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE bm25_indexes ALTER COLUMN payload SET STORAGE EXTERNAL",
            reverse_sql="ALTER TABLE bm25_indexes ALTER COLUMN payload SET STORAGE EXTENDED",
        ),
    ]
