"""The tenant model moved to the ``tenancy`` app: the foreign key points to the same table
(state only). Runs before ``knowledge`` forgets its copy of the model."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("retrieval", "0002_bm25_payload_storage_external"),
        ("tenancy", "0001_initial"),
    ]
    run_before = [("knowledge", "0006_tenancy_moved_out")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="bm25index",
                    name="tenant",
                    field=models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenancy.tenant",
                    ),
                ),
            ],
            database_operations=[],
        ),
    ]
