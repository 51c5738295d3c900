"""A Celery worker yields the CPU to the web processes it shares a host with.

``WORKER_NICE`` lowers the worker's own priority (``rag_project.celery``); a prefork pool's
children inherit it. Only the application's own processes are touched: the database server's
processes, and any other server's, belong to the deployment's operator, who sets their
priority (or their cgroup's CPU weight) as they see fit.
"""

from __future__ import annotations

import os


def lower_own(steps: int) -> None:
    """This process (and the children it forks from now on) ``steps`` nice steps lower."""
    if steps > 0:
        os.nice(min(steps, 19))
