"""Production profile: refuses to start without a real SECRET_KEY, hardens cookies and headers.

Select it with ``DJANGO_SETTINGS_MODULE=rag_project.settings.production`` (docker-compose and
the load benchmark's gunicorn do).
"""

from django.core.exceptions import ImproperlyConfigured

from .base import *
from .base import SECRET_KEY, env

DEBUG = env.bool("DEBUG", default=False)

if (
    not SECRET_KEY
    or SECRET_KEY.startswith("django-insecure")
    or len(set(SECRET_KEY)) < 5
    or len(SECRET_KEY) < 50
):
    raise ImproperlyConfigured(
        "The production profile needs a real SECRET_KEY: at least 50 random characters, not a "
        'django-insecure development key. Generate one with: python -c "import secrets; '
        'print(secrets.token_urlsafe(64))"'
    )

SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
