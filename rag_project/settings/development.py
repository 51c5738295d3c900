"""Development profile: the default of manage.py. Debug on, a fixed local-only secret key."""

from .base import *
from .base import env

DEBUG = env.bool("DEBUG", default=True)
SECRET_KEY = env.str("SECRET_KEY", default="") or (
    "django-insecure-development-only-key-never-use-in-production-9f3b2c7a"
)
# A machine of one's own: `curl /healthz` shows the full report (rag_project/health.py).
RAG_HEALTH_DETAILS = env.str("RAG_HEALTH_DETAILS", default="public")
