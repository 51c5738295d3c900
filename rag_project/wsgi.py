import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rag_project.settings.development")

application = get_wsgi_application()

# This process is about to serve: warm it up in the background (retrieval.warmup). gunicorn
# imports this module in each worker after the fork (without --preload), so each worker warms
# itself; runserver imports it in its serving child.
from rag_project.lifecycle import process_started  # noqa: E402

process_started.send(sender="web")
