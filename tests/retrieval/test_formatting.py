"""Hits as text for LLMs: numbered citations, sources, and never a silent cut."""

from retrieval.search.formatting import format_for_context, format_for_tool_output
from retrieval.search.types import Hit


def hit(n: int, content: str, page=None, title=None) -> Hit:
    return Hit(
        chunk_id=n,
        document_id=100 + n,
        knowledge_base_id=1,
        document_title=title or f"Doc {n}",
        content=content,
        score=1 / n,
        page=page,
        heading_path=["Intro"] if n == 1 else [],
        original_filename=f"doc{n}.pdf",
    )


def test_context_numbers_citations_and_lists_sources():
    text = format_for_context([hit(1, "Alpha text.", page=3), hit(2, "Beta text.")], 2000)
    assert text.startswith("[1] Doc 1, p. 3, Intro\nAlpha text.")
    assert "[2] Doc 2\nBeta text." in text
    assert text.endswith("Sources:\n[1] Doc 1 (doc1.pdf, page 3)\n[2] Doc 2 (doc2.pdf)")


def test_context_never_cuts_silently():
    hits = [hit(1, "a" * 900), hit(2, "b" * 900), hit(3, "c" * 900)]
    text = format_for_context(hits, 1600)
    assert len(text) <= 1600
    assert "a" * 900 in text  # the first fits whole
    assert "[…truncated]" in text  # the second is cut, and says so
    assert "[1 more result left out: context limit]" in text
    assert "[3]" not in text.split("Sources:")[1]


def test_context_with_no_hits_says_so():
    assert format_for_context([], 100) == "No relevant documents were found."


def test_tool_output_is_compact_and_bounded():
    out = format_for_tool_output([hit(i, f"text {i}") for i in range(1, 8)], max_chunks=2)
    assert out.startswith("Found 7 relevant chunks; showing 2.")
    assert "text 1" in out and "text 2" in out and "text 3" not in out
    assert format_for_tool_output([]) == "No relevant documents were found in the knowledge base."


def test_a_heading_that_repeats_the_title_is_not_repeated():
    repeated = Hit(
        chunk_id=1,
        document_id=1,
        knowledge_base_id=1,
        document_title="Pump handbook",
        content="x",
        score=1.0,
        heading_path=["Pump handbook", "Seals"],
    )
    assert format_for_context([repeated]).startswith("[1] Pump handbook, Seals\n")
