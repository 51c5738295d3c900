"""Loading BM25's compiled query loops (retrieval.bm25.kernels): once, never waited for, and a
process without numba answers the same on the numpy path. What the loops compute is checked
against the numpy path and one index in tests/retrieval/test_bm25_segments.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest
from django.conf import settings as django_settings

from retrieval.bm25 import kernels
from retrieval.search import RAGService

_SEARCH = """
    from retrieval.bm25 import Segment, SegmentedIndex, kernels
    view = SegmentedIndex([Segment.build([1, 2, 3], [["pump", "seal"], ["pump"], ["valve"]])])
"""


def _run(script: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=django_settings.BASE_DIR, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return done.stdout.split("\n")[:-1]


def test_the_loops_load_once_and_numpy_only_suspends_them():
    assert kernels.load() and kernels.load()  # the second call finds them loaded
    loops = kernels.get()
    assert loops is not None and callable(loops.scatter_add)
    assert kernels.start_loading() is None  # nothing left to load
    with kernels.numpy_only():
        with kernels.numpy_only():
            assert kernels.get() is None
        assert kernels.get() is None  # still inside the outer one
    assert kernels.get() is loops


def test_a_new_process_answers_on_numpy_until_the_background_load_is_done():
    lines = _run(
        _SEARCH
        + """
    first = view.search(["pump", "seal"], 2)
    print(kernels.get() is None)
    thread = kernels.start_loading()
    print(kernels.start_loading() is None)  # one load at a time
    thread.join()
    print(kernels.get() is not None, view.search(["pump", "seal"], 2) == first, first)
    """
    )
    assert lines[:2] == ["True", "True"]
    assert lines[2].startswith("True True [(1, ")


def test_without_numba_the_numpy_path_answers():
    lines = _run(
        """
    import sys
    sys.modules["numba"] = None  # as if not installed: importing it raises ImportError
    """
        + _SEARCH
        + """
    print(kernels.load(), kernels.get() is None, [d for d, _ in view.search(["pump"], 5)])
    """
    )
    assert lines == ["False True [2, 1]"]


@pytest.mark.django_db
def test_a_search_starts_loading_the_loops_in_a_process_that_has_not(
    manuals, monkeypatch, settings
):
    monkeypatch.setattr(kernels.LOOPS, "_tried", False)
    monkeypatch.setattr(kernels.LOOPS, "_loaded", None)
    result = RAGService(manuals.tenant).search("pump seal", manuals.pk, mode="keyword")
    assert result.hits  # answered without waiting (the numpy path, or the loops if done)
    for thread in [t for t in threading.enumerate() if t.name == "bm25-compiled"]:
        thread.join()
    assert kernels.get() is not None

    monkeypatch.setattr(kernels.LOOPS, "_tried", False)
    monkeypatch.setattr(kernels.LOOPS, "_loaded", None)
    settings.BM25_COMPILED = False
    RAGService(manuals.tenant).search("pump seal", manuals.pk, mode="keyword")
    assert kernels.get() is None and not kernels.LOOPS._tried  # switched off: never loaded
