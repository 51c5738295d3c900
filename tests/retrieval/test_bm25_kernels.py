"""Loading BM25's compiled query loops (retrieval.bm25.kernels): once per process, by the first
caller while the others wait for it, and an error naming numba when it is missing. What the loops
compute is checked against rank_bm25 in tests/retrieval/test_bm25_segments.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from django.conf import settings as django_settings

from retrieval.bm25 import kernels
from retrieval.search import RAGService

_VIEW = """
    from retrieval.bm25 import Segment, SegmentedIndex, kernels
    view = SegmentedIndex([Segment.build([1, 2, 3], [["pump", "seal"], ["pump"], ["valve"]])])
"""


def _run(script: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=django_settings.BASE_DIR, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return done.stdout.split("\n")[:-1]


def test_the_loops_load_once():
    loops = kernels.get()
    assert callable(loops.scatter_add) and kernels.get() is loops


def test_concurrent_first_searches_wait_for_one_load_and_answer_alike():
    lines = _run(
        _VIEW
        + """
    import threading
    from retrieval.bm25.kernels import LOOPS
    warmed, warm = [], LOOPS.warm
    LOOPS.warm = lambda module: warmed.append(1) or warm(module)
    print(LOOPS._loaded is None)  # nothing loaded on import
    found = []
    threads = [
        threading.Thread(target=lambda: found.append(view.search(["pump", "seal"], 2)))
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(len(warmed), len(found), all(f == found[0] for f in found), found[0])
    """
    )
    assert lines[0] == "True"
    assert lines[1].startswith("1 4 True [(1, ")


def test_without_numba_a_search_fails_saying_so():
    lines = _run(
        """
    import sys
    sys.modules["numba"] = None  # as if not installed: importing it raises ImportError
    """
        + _VIEW
        + """
    from retrieval.compiled import LoopsUnavailable
    for _ in range(2):  # asked again: the same error, not a silent answer
        try:
            view.search(["pump"], 5)
        except LoopsUnavailable as exc:
            print(exc)
    """
    )
    assert len(lines) == 2 and lines[0] == lines[1]
    assert "numba is a required dependency" in lines[0] and "make install" in lines[0]


def test_precompiling_loads_every_loop():
    lines = _run(
        """
    from retrieval import precompile
    from retrieval.bm25 import kernels as bm25_kernels
    from retrieval.vector import kernels as vector_kernels
    precompile.main()
    print(bm25_kernels.LOOPS._loaded is not None, vector_kernels.LOOPS._loaded is not None)
    """
    )
    assert lines == ["True True"]


@pytest.mark.django_db
def test_a_search_loads_the_loops_in_a_process_that_has_not(manuals, monkeypatch):
    monkeypatch.setattr(kernels.LOOPS, "_loaded", None)
    result = RAGService(manuals.tenant).search("pump seal", manuals.pk, mode="keyword")
    assert result.hits
    assert kernels.LOOPS._loaded is not None
