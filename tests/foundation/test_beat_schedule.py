"""Every periodic task beat sends is one a worker knows: a misspelt name would be sent, never
run, and nothing would say so."""

from django.conf import settings

from rag_project.celery import app


def test_every_beat_entry_names_a_registered_task():
    app.loader.import_default_modules()  # what a worker imports at start
    names = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert "retrieval.tidy_chunk_table" in names
    assert names <= set(app.tasks), names - set(app.tasks)
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["schedule"] > 0
