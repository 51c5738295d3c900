"""Django project package: settings, URLs, the Celery app and the embedded services."""

import os

# OpenBLAS threads spin for 2^28 cycles after each call before they sleep. Beside busy web
# worker processes that spinning eats the cores the other workers need once the vector leg scans
# with two threads (docs/performance.md); 2^4 cycles keeps the threads and drops the spinning.
# OpenBLAS reads this when numpy loads, so it is set here, before anything imports numpy.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from .celery import app as celery_app

__all__ = ("celery_app",)
