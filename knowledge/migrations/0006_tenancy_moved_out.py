"""Tenants, memberships and API keys now belong to the ``tenancy`` app (its 0001 migration).
State only: the foreign keys point to the same tables, and an API key's restriction to knowledge
bases is declared on this side over the existing table ``knowledge_apikey_knowledge_bases``
(same columns), so the database is untouched."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0005_kb_langchain_provider"),
        ("tenancy", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="knowledgebase",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="knowledge_bases",
                        to="tenancy.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="document",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="documents",
                        to="tenancy.tenant",
                    ),
                ),
                migrations.AlterField(
                    model_name="chunk",
                    name="tenant",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenancy.tenant",
                    ),
                ),
                migrations.RemoveField(model_name="apikey", name="knowledge_bases"),
                migrations.DeleteModel(name="ApiKey"),
                migrations.DeleteModel(name="Membership"),
                migrations.DeleteModel(name="Tenant"),
                migrations.AddField(
                    model_name="knowledgebase",
                    name="restricted_api_keys",
                    field=models.ManyToManyField(
                        blank=True,
                        db_table="knowledge_apikey_knowledge_bases",
                        related_name="knowledge_bases",
                        to="tenancy.apikey",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
