"""A serving process's long-lived heap, kept out of Python's full garbage collections.

CPython's cyclic collector walks every container object of the generation it collects; a full
(generation 2) collection walks all of them, and the process does nothing else meanwhile (the
GIL is held throughout). A warm web process holds ~615k such objects, almost all for as long as
it lives: Django's and the libraries' modules, classes and functions (~225k) and the local
embedding model (PyTorch and transformers, ~390k). A full collection of such a heap stalls the
process for hundreds of milliseconds, and under load each worker runs one every few tens of
seconds: every search queued behind it waits it out (figures: docs/performance.md, "Figures
behind choices in the code").

So a serving process **freezes** its long-lived heap (``gc.freeze``: the objects move to the
permanent generation, which collections skip):

- at the end of its warm-up (``retrieval.warmup``), after one full collection (so no garbage is
  frozen), before ``/healthz`` says warm;
- again whenever a full collection takes longer than ``RAG_GC_FREEZE_ABOVE_MS`` (something big
  was loaded later: a model first used after the warm-up, a new knowledge base's index). The
  collector's callback only marks the freeze due; it happens at the next quiet point, after a
  response is sent (Django's ``request_finished``) or a Celery task ends, after a collection of
  the young generations so the request's own cycles are not frozen.

Objects made afterwards are collected as before, so garbage made while serving is still
reclaimed. The cost: a reference cycle among frozen objects is never collected (reference
counting still frees all the rest), which suits state that lives as long as the process.
``RAG_GC_FREEZE_ABOVE_MS = 0`` turns both off. ``stats()`` feeds ``/healthz`` (``heap``).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.core.signals import request_finished

logger = logging.getLogger(__name__)

_lock = threading.Lock()
_installed = False
_collection_started: float | None = None
_due = False
_threshold_ms = 0.0  # settings.RAG_GC_FREEZE_ABOVE_MS when installed (read once: the callback
# runs inside the collector)
_state: dict[str, Any] = {
    "freezes": 0,
    "frozen_objects": 0,
    "full_collections": 0,
    "last_full_collection_ms": None,
    "slowest_full_collection_ms": 0.0,
}


def enabled() -> bool:
    return settings.RAG_GC_FREEZE_ABOVE_MS > 0


def install() -> bool:
    """Watch full collections in this process and freeze after slow ones (once per process;
    False when turned off or already installed). Sent with ``process_started``."""
    global _installed, _threshold_ms
    with _lock:
        if _installed or not enabled():
            return False
        _installed, _threshold_ms = True, settings.RAG_GC_FREEZE_ABOVE_MS
    gc.callbacks.append(_on_collection)
    request_finished.connect(_after_work, dispatch_uid="rag_project.heap")
    return True


def uninstall() -> None:
    """Undo ``install`` (tests)."""
    global _installed, _due
    with _lock:
        _installed = _due = False
    if _on_collection in gc.callbacks:
        gc.callbacks.remove(_on_collection)
    request_finished.disconnect(dispatch_uid="rag_project.heap")


def freeze(*, full: bool = True) -> int:
    """Collect (all generations with ``full``, else the young ones) and freeze what survives;
    the number of objects frozen by this call. A no-op returning 0 when turned off."""
    global _due
    if not enabled():
        return 0
    started = time.perf_counter()
    before = gc.get_freeze_count()
    gc.collect() if full else gc.collect(1)
    gc.freeze()
    frozen = gc.get_freeze_count() - before
    with _lock:
        _due = False
        _state["freezes"] += 1
        _state["frozen_objects"] = gc.get_freeze_count()
    logger.info(
        "froze %d long-lived objects (%d in all) in %.0f ms; full collections now skip them",
        frozen,
        gc.get_freeze_count(),
        (time.perf_counter() - started) * 1000,
    )
    return frozen


def freeze_if_due() -> int:
    """Freeze now if a slow full collection asked for it (0 if none did)."""
    if not _due:
        return 0
    return freeze(full=False)


def stats() -> dict[str, Any]:
    with _lock:
        return {"freeze_above_ms": settings.RAG_GC_FREEZE_ABOVE_MS, **_state}


def on_process_started(sender: str, **kwargs) -> None:
    install()


def _after_work(**kwargs) -> None:
    freeze_if_due()


def _on_collection(phase: str, info: dict[str, int]) -> None:
    """gc's callback: times full collections and marks a freeze due after a slow one. Runs
    inside the collector: it only records."""
    global _collection_started, _due
    if info.get("generation") != 2:
        return
    if phase == "start":
        _collection_started = time.perf_counter()
        return
    if _collection_started is None:
        return
    ms = (time.perf_counter() - _collection_started) * 1000
    _collection_started = None
    _state["full_collections"] += 1
    _state["last_full_collection_ms"] = round(ms, 1)
    _state["slowest_full_collection_ms"] = round(max(_state["slowest_full_collection_ms"], ms), 1)
    if ms > _threshold_ms:
        _due = True
