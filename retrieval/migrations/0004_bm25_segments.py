"""The BM25 index is stored as segments: ``bm25_indexes`` holds a row per segment and
``bm25_manifests`` a row per knowledge base naming its segments. The old rows (one whole index
per knowledge base) cannot be split: the table is a cache, so it starts empty and the first
search (or the reaper's rebuild) fills it again."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0006_tenancy_moved_out"),
        ("retrieval", "0003_tenant_in_tenancy"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        migrations.DeleteModel(name="BM25Index"),
        migrations.CreateModel(
            name="BM25Segment",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("key", models.CharField(max_length=32)),
                ("payload", models.BinaryField()),
                ("signature", models.CharField(max_length=64)),
                ("chunk_count", models.PositiveIntegerField(default=0)),
                ("postings", models.PositiveBigIntegerField(default=0)),
                ("payload_bytes", models.PositiveBigIntegerField(default=0)),
                ("build_seconds", models.FloatField(default=0.0)),
                ("built_at", models.DateTimeField(auto_now_add=True)),
                ("dropped_at", models.DateTimeField(blank=True, null=True)),
                (
                    "knowledge_base",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="bm25_segments",
                        to="knowledge.knowledgebase",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenancy.tenant",
                    ),
                ),
            ],
            options={
                "verbose_name": "BM25 segment",
                "verbose_name_plural": "BM25 segments",
                "db_table": "bm25_indexes",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("knowledge_base", "key"), name="bm25_segment_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="BM25Manifest",
            fields=[
                (
                    "knowledge_base",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="bm25_manifest",
                        serialize=False,
                        to="knowledge.knowledgebase",
                    ),
                ),
                ("version", models.BigIntegerField()),
                ("payload", models.BinaryField()),
                ("signature", models.CharField(max_length=64)),
                ("segment_count", models.PositiveIntegerField(default=0)),
                ("chunk_count", models.PositiveIntegerField(default=0)),
                ("deleted_count", models.PositiveIntegerField(default=0)),
                ("merges", models.PositiveIntegerField(default=0)),
                ("build_seconds", models.FloatField(default=0.0)),
                ("built_at", models.DateTimeField(auto_now=True)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenancy.tenant",
                    ),
                ),
            ],
            options={
                "verbose_name": "BM25 index",
                "verbose_name_plural": "BM25 indexes",
                "db_table": "bm25_manifests",
            },
        ),
        # Payloads are zlib-compressed already: out of line, not compressed again (0002).
        migrations.RunSQL(
            "ALTER TABLE bm25_indexes ALTER COLUMN payload SET STORAGE EXTERNAL",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
