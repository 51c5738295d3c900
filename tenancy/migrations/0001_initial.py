"""Tenants, memberships and API keys move here from ``knowledge``: a change of Django's state
only. The tables keep their names and rows (``knowledge_tenant``, ``knowledge_membership``,
``knowledge_apikey``); the content types are relabelled so admin history and permissions follow.
On a new database the tables come from ``knowledge.0001_initial``, which this depends on."""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = ("tenant", "membership", "apikey")


def relabel_content_types(apps, schema_editor, old="knowledge", new="tenancy"):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for model in MOVED:
        if not ContentType.objects.filter(app_label=new, model=model).exists():
            ContentType.objects.filter(app_label=old, model=model).update(app_label=new)


def restore_content_types(apps, schema_editor):
    relabel_content_types(apps, schema_editor, old="tenancy", new="knowledge")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("knowledge", "0005_kb_langchain_provider"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Tenant",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100, unique=True)),
                        ("slug", models.SlugField(max_length=100, unique=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                    ],
                    options={"db_table": "knowledge_tenant", "ordering": ["name"]},
                ),
                migrations.CreateModel(
                    name="Membership",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "role",
                            models.CharField(
                                choices=[
                                    ("owner", "Owner"),
                                    ("admin", "Admin"),
                                    ("editor", "Editor"),
                                    ("viewer", "Viewer"),
                                ],
                                default="viewer",
                                max_length=10,
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to="tenancy.tenant",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="memberships",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "knowledge_membership",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("user", "tenant"), name="membership_unique_user_tenant"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="ApiKey",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        ("prefix", models.CharField(max_length=16, unique=True)),
                        ("secret_hash", models.CharField(max_length=64, unique=True)),
                        (
                            "scopes",
                            django.contrib.postgres.fields.ArrayField(
                                base_field=models.CharField(
                                    choices=[
                                        ("read", "Read (list and search)"),
                                        ("write", "Write (create, upload, delete)"),
                                    ],
                                    max_length=10,
                                ),
                                default=list,
                                size=None,
                            ),
                        ),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("last_used_at", models.DateTimeField(blank=True, null=True)),
                        ("revoked_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_by",
                            models.ForeignKey(
                                blank=True,
                                null=True,
                                on_delete=django.db.models.deletion.SET_NULL,
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                        (
                            "tenant",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_keys",
                                to="tenancy.tenant",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "knowledge_apikey",
                        "verbose_name": "API key",
                        "ordering": ["-created_at", "-id"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("tenant", "name"), name="apikey_unique_name_per_tenant"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(relabel_content_types, restore_content_types),
    ]
