"""The Celery application: Redis broker, JSON only, explicit time limits, late acks.

Configuration comes from Django settings prefixed ``CELERY_`` (see settings/base.py). Start a
worker with ``celery -A rag_project worker``; ``make run`` starts one beside the web server.
"""

import os

from celery import Celery

from rag_project import broker

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rag_project.settings.development")

broker.install()  # a worker survives Redis going away (see rag_project/broker.py)
app = Celery("rag_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
