"""Hits as text for language models: numbered citations for a prompt, or a tool's answer.

``format_for_context`` numbers each chunk ``[1]``, ``[2]``... with its document title and page,
then lists the sources, within a character budget. A chunk that does not fit whole is either
cut with an explicit ``[truncated]`` marker (when a useful part fits) or left out, and the text
says how many results were left out: nothing is ever cut silently.
"""

from __future__ import annotations

from collections.abc import Sequence

from retrieval.search.types import Hit

TRUNCATED = " […truncated]"
MIN_USEFUL_CHARS = 200


def _label(hit: Hit) -> str:
    parts = [hit.document_title or hit.original_filename or f"document {hit.document_id}"]
    if hit.page is not None:
        parts.append(f"p. {hit.page}")
    headings = [h for h in hit.heading_path if h != parts[0]]  # an H1 often repeats the title
    if headings:
        parts.append(" > ".join(headings))
    return ", ".join(parts)


def citation(number: int, hit: Hit) -> str:
    """A hit's source line, as the context lists it: ``[n] Title (file.pdf, page 3)``."""
    where = hit.original_filename or f"document {hit.document_id}"
    page = f", page {hit.page}" if hit.page is not None else ""
    return f"[{number}] {hit.document_title} ({where}{page})"


def format_for_context(hits: Sequence[Hit], max_chars: int = 6000) -> str:
    """Numbered chunks and a sources list, at most ``max_chars`` characters."""
    if not hits:
        return "No relevant documents were found."
    blocks: list[str] = []
    sources: list[str] = []
    used = 0
    omitted = 0
    for number, hit in enumerate(hits, start=1):
        header = f"[{number}] {_label(hit)}\n"
        source = citation(number, hit)
        # Keep room for this source line, the sources heading and a note on what was left out.
        reserve = len(source) + 80 + sum(len(s) + 1 for s in sources)
        room = max_chars - used - reserve - len(header)
        if room >= len(hit.content):
            body = hit.content
        elif room >= MIN_USEFUL_CHARS:
            body = hit.content[: room - len(TRUNCATED)].rstrip() + TRUNCATED
        else:
            omitted = len(hits) - number + 1
            break
        block = header + body
        blocks.append(block)
        sources.append(source)
        used += len(block) + 2
    text = "\n\n".join(blocks)
    if omitted:
        text += f"\n\n[{omitted} more result{'s' if omitted > 1 else ''} left out: context limit]"
    return text + "\n\nSources:\n" + "\n".join(sources)


def format_for_tool_output(hits: Sequence[Hit], max_chunks: int = 5) -> str:
    """A compact answer for an agent's tool call: the best chunks with their citations."""
    if not hits:
        return "No relevant documents were found in the knowledge base."
    shown = hits[:max_chunks]
    lines = [
        f"Found {len(hits)} relevant chunk{'s' if len(hits) != 1 else ''}; showing {len(shown)}."
    ]
    for number, hit in enumerate(shown, start=1):
        lines.append(f"\n[{number}] {_label(hit)} ({_strength(hit)})\n{hit.content}")
    return "\n".join(lines)


def _strength(hit: Hit) -> str:
    """A hit's relevance when it has one (0-1, comparable across searches), else its score."""
    if hit.relevance is not None:
        return f"relevance {hit.relevance:.2f}"
    return f"score {hit.score:.3f}"
