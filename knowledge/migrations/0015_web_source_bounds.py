"""Bounds on a web source's schedule and size: ``sync_interval_s`` is 0 (only when asked) or
from ``RAG_WEB_MIN_SYNC_INTERVAL_S`` up to a year, ``max_total_bytes`` at most 10 GiB. Validators
only: no column changes."""

import django.core.validators
import knowledge.web.models
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("knowledge", "0014_document_searchable_stamps"),
    ]

    operations = [
        migrations.AlterField(
            model_name="websource",
            name="max_total_bytes",
            field=models.PositiveBigIntegerField(
                default=524288000,
                validators=[
                    django.core.validators.MinValueValidator(1024),
                    django.core.validators.MaxValueValidator(10737418240),
                ],
            ),
        ),
        migrations.AlterField(
            model_name="websource",
            name="sync_interval_s",
            field=models.PositiveIntegerField(
                default=86400,
                help_text="Seconds between scheduled syncs; 0: only when asked. At least the deployment's minimum (RAG_WEB_MIN_SYNC_INTERVAL_S, an hour by default), at most a year.",
                validators=[
                    knowledge.web.models.SyncIntervalValidator(),
                    django.core.validators.MaxValueValidator(31536000),
                ],
            ),
        ),
    ]
