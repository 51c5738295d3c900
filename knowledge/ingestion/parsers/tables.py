"""Rows of a table (.csv, a sheet of .xlsx) as text: labelled rows, or question/answer pairs.

A row becomes one line, each cell labelled with its column, "name: Alice; city: Paris": a chunk
of a table is useless to retrieval if it holds bare values whose column names stayed in the first
chunk, and labelling every cell makes each row self-describing. Empty cells are left out. Rows
are joined by single line breaks and cell values are made one-line, so the chunker (which cuts
at line breaks before anything finer) packs whole rows and never cuts one shorter than a chunk.

A table with a question and an answer column is a list of Q&A pairs, as FAQ exports are: each
pair becomes its own section, the question its heading path and the answer its text. Chunks are
cut within sections, so a pair is one chunk (an answer longer than a chunk is cut like any text,
each piece under its question); the analyser indexes the heading path with the text, so the
question is searchable and the answer is what search returns. Other non-empty columns follow the
answer as "name: value" lines, so nothing in the file is lost.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .base import ParseError, ParseOptions, TextAssembler, clean_inline, clean_text

_QUESTION_NAMES = frozenset(
    {"question", "questions", "q", "query", "faq", "问题", "问", "提问", "问句", "常见问题"}
)
_ANSWER_NAMES = frozenset(
    {"answer", "answers", "a", "reply", "response", "答案", "答", "回答", "答复", "回复", "解答"}
)
# Header decorations that do not change a column's meaning: "Question:", "问题？", "(Q)".
_DECORATION = re.compile(r"[\s:：?？()（）\[\]【】#*._-]+")


def column_labels(cells: Sequence[str]) -> list[str]:
    """One label per header cell; an empty one is named by its position."""
    return [clean_inline(c) or f"column {i}" for i, c in enumerate(cells, 1)]


def qa_columns(labels: Sequence[str], options: ParseOptions) -> tuple[int, int] | None:
    """(question index, answer index) when the table is to be read as Q&A pairs, else None.

    Raises ParseError when the uploader asked for pairs that the header does not have.
    """
    if options.qa_pairs is False:
        return None
    named = bool(options.qa_question_column or options.qa_answer_column)
    question = _find(labels, options.qa_question_column, _QUESTION_NAMES)
    answer = _find(labels, options.qa_answer_column, _ANSWER_NAMES)
    if question is not None and answer is not None and question != answer:
        return question, answer
    if options.qa_pairs or named:
        wanted = (
            f'"{options.qa_question_column or "question"}" and '
            f'"{options.qa_answer_column or "answer"}"'
        )
        raise ParseError(
            f"Q&A pairs were asked for, but the header ({'; '.join(labels)}) has no columns "
            f"{wanted}; name them with qa_question_column and qa_answer_column"
        )
    return None


def _find(labels: Sequence[str], given: str, names: frozenset[str]) -> int | None:
    keys = [_DECORATION.sub("", label).casefold() for label in labels]
    if given:
        wanted = _DECORATION.sub("", given).casefold()
        return next((i for i, key in enumerate(keys) if key == wanted), None)
    return next((i for i, key in enumerate(keys) if key in names), None)


class TableWriter:
    """Adds the rows of one table to an assembler, as labelled lines or as Q&A pairs."""

    def __init__(
        self,
        assembler: TextAssembler,
        labels: Sequence[str],
        options: ParseOptions,
        *,
        page: int | None = None,
        heading_path: tuple[str, ...] = (),
    ) -> None:
        self._assembler = assembler
        self.labels = list(labels)
        self._page = page
        self._heading_path = heading_path
        self.qa = qa_columns(self.labels, options)
        self.rows = 0  # rows (or pairs) added
        self.skipped = 0  # Q&A rows without a question or an answer

    def add(self, cells: Sequence[str]) -> None:
        if self.qa is None:
            line = "; ".join(
                f"{self._label(i)}: {value}"
                for i, value in enumerate(clean_inline(c) for c in cells)
                if value
            )
            if line:
                self._assembler.add(
                    line, page=self._page, heading_path=self._heading_path, separator="\n"
                )
                self.rows += 1
            return
        q, a = self.qa
        question = clean_inline(cells[q]) if q < len(cells) else ""
        answer = clean_text(cells[a]).strip() if a < len(cells) else ""
        if not (question and answer):
            self.skipped += any(clean_inline(c) for c in cells)
            return
        extras = [
            f"{self._label(i)}: {value}"
            for i, value in enumerate(clean_inline(c) for c in cells)
            if value and i not in (q, a)
        ]
        self._assembler.add("\n".join([answer, *extras]), page=self._page, heading_path=(question,))
        self.rows += 1

    def _label(self, index: int) -> str:
        return self.labels[index] if index < len(self.labels) else f"column {index + 1}"
