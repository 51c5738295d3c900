"""A process's start: the signal that says it is about to serve, and how far its warm-up got.

``process_started`` is sent once per serving process: by ``rag_project.wsgi`` when a web
process (gunicorn worker after its fork, ``runserver``'s serving child) has built its
application, and by the Celery worker's process-init signal. ``retrieval`` connects the warm-up
to it (``retrieval.warmup``: the analyser's dictionaries, the embedding models in use, the
hottest knowledge bases' indexes, loaded in a background thread). Management commands never
send it, so ``migrate`` and friends stay cold.

``WARM`` is this process's warm-up state, written by the warm-up and read by ``/healthz``
(``rag_project`` knows nothing of what is warmed, only how it went).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.dispatch import Signal

process_started = Signal()  # sender: "web" or "worker"


class WarmState:
    """Thread-safe: ``off`` (warming disabled or not started), ``warming``, ``warm``, or
    ``failed`` (some step raised: the process serves, the part that failed loads on first
    use)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.state = "off"
            self.started = self.finished = None
            self.loaded: dict[str, Any] = {}
            self.errors: list[str] = []

    def begin(self) -> None:
        with self._lock:
            self.state, self.started, self.finished = "warming", time.monotonic(), None
            self.loaded, self.errors = {}, []

    def note(self, what: str, value: Any) -> None:
        with self._lock:
            self.loaded[what] = value

    def fail(self, message: str) -> None:
        with self._lock:
            self.errors.append(message)

    def end(self) -> None:
        with self._lock:
            self.finished = time.monotonic()
            self.state = "failed" if self.errors else "warm"

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            body: dict[str, Any] = {"state": self.state}
            if self.started is not None:
                end = self.finished if self.finished is not None else time.monotonic()
                body["seconds"] = round(end - self.started, 3)
                body["loaded"] = dict(self.loaded)
            if self.errors:
                body["errors"] = list(self.errors)
            return body


WARM = WarmState()
