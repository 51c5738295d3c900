"""Chunking parsed documents: exact offsets, sizes, overlap, and metadata from sections."""

from __future__ import annotations

import cProfile
import itertools
import pstats
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge.ingestion.chunking import ChunkingConfig, TextChunk, chunk_document
from knowledge.ingestion.parsing import FileType, ParsedDocument, Section, parse_document
from tests.knowledge.test_parsing import HTML_PAGE, MARKDOWN, build_docx, build_pdf

ENGLISH = [
    "The index is rebuilt after every upload. ",
    "Does the search use BM25? ",
    "Yes! ",
    "Vectors, keywords and fusion; all three matter. ",
    "Dr. Smith wrote it.",
]
CHINESE = [
    "今天我们讨论检索增强生成。",
    "向量检索和关键词检索需要融合！",
    "为什么要切分文档？",
    "第一点；第二点，第三点。",
    "没有标点的长句子里也有很多汉字",
]
FRAGMENTS = [*ENGLISH, *CHINESE, "\n", "\n\n", " ", "，", "。", "a", "ab ", "\t", "\u3000"]


def plain(text: str) -> ParsedDocument:
    return ParsedDocument(text=text, file_type=FileType.TXT, title=None, sections=())


def assert_chunk_invariants(doc: ParsedDocument, chunks: list[TextChunk], config: ChunkingConfig):
    assert [c.position for c in chunks] == list(range(len(chunks)))
    covered = bytearray(len(doc.text))
    previous: TextChunk | None = None
    for chunk in chunks:
        assert doc.text[chunk.start : chunk.end] == chunk.content
        assert chunk.content == chunk.content.strip() and chunk.content
        assert len(chunk.content) <= config.chunk_size
        if previous is not None:
            assert chunk.start >= previous.start
            assert previous.end - chunk.start <= config.chunk_overlap
        covered[chunk.start : chunk.end] = b"\x01" * len(chunk.content)
        previous = chunk
    lost = [ch for ch, seen in zip(doc.text, covered, strict=True) if not seen and not ch.isspace()]
    assert not lost, f"characters in no chunk: {lost[:20]}"


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(
        st.one_of(st.sampled_from(FRAGMENTS), st.text(alphabet="ab 。.，,\n", max_size=12)),
        max_size=80,
    ),
    chunk_size=st.integers(min_value=1, max_value=160),
    overlap_fraction=st.floats(min_value=0, max_value=0.9),
)
def test_chunks_are_exact_bounded_and_lose_nothing(pieces, chunk_size, overlap_fraction):
    doc = plain("".join(pieces))
    config = ChunkingConfig(chunk_size, int(chunk_size * overlap_fraction))

    chunks = chunk_document(doc, config)

    assert_chunk_invariants(doc, chunks, config)


@settings(max_examples=100, deadline=None)
@given(
    blocks=st.lists(
        st.tuples(
            st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=20),
            st.sampled_from([None, 1, 2]),
            st.sampled_from([(), ("A",), ("A", "B")]),
        ),
        min_size=1,
        max_size=8,
    ),
    chunk_size=st.integers(min_value=5, max_value=120),
)
def test_chunks_never_cross_sections_with_different_metadata(blocks, chunk_size):
    text, sections = "", []
    for pieces, page, heading_path in blocks:
        body = "".join(pieces).strip()
        if not body:
            continue
        text += "\n\n" if text else ""
        sections.append(Section(body, len(text), len(text) + len(body), page, heading_path))
        text += body
    doc = ParsedDocument(text, FileType.TXT, None, tuple(sections))
    config = ChunkingConfig(chunk_size, chunk_size // 5)

    chunks = chunk_document(doc, config)

    assert_chunk_invariants(doc, chunks, config)
    for chunk in chunks:
        inside = [s for s in sections if s.start < chunk.end and chunk.start < s.end]
        assert {(s.page, s.heading_path) for s in inside} == {(chunk.page, chunk.heading_path)}


def test_repeated_text_gets_the_offsets_of_its_own_occurrence():
    # langchain's add_start_index would place the second "，" at the first one.
    text = "aab 中文。，ab. ，aab 中文。，"
    chunks = chunk_document(plain(text), ChunkingConfig(chunk_size=5, chunk_overlap=4))
    assert [(c.content, c.start) for c in chunks if c.content == "，"] == [("，", 12), ("，", 20)]


def test_chinese_punctuation_stays_with_its_sentence():
    text = "".join(CHINESE[:4]) * 3
    chunks = chunk_document(plain(text), ChunkingConfig(chunk_size=40, chunk_overlap=0))
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.content[-1] in "。！？；，"
        assert chunk.content[0] not in "。！？；，"


def test_english_sentences_end_chunks_when_they_fit():
    text = "".join(ENGLISH[:4]) * 10
    chunks = chunk_document(plain(text), ChunkingConfig(chunk_size=100, chunk_overlap=0))
    assert all(chunk.content[-1] in ".?!;" for chunk in chunks)


def test_overlap_repeats_the_end_of_a_chunk_at_the_start_of_the_next():
    text = " ".join(f"Sentence number {i} is here." for i in range(60))

    with_overlap = chunk_document(plain(text), ChunkingConfig(chunk_size=200, chunk_overlap=60))
    without = chunk_document(plain(text), ChunkingConfig(chunk_size=200, chunk_overlap=0))

    overlaps = [a.end - b.start for a, b in itertools.pairwise(with_overlap)]
    assert all(0 < overlap <= 60 for overlap in overlaps)
    assert all(a.end <= b.start for a, b in itertools.pairwise(without))
    assert len(with_overlap) > len(without)


def test_long_runs_without_separators_are_cut_to_the_chunk_size():
    text = "x" * 1000
    chunks = chunk_document(plain(text), ChunkingConfig(chunk_size=300, chunk_overlap=50))
    assert [(c.start, c.end) for c in chunks] == [(0, 300), (250, 550), (500, 800), (750, 1000)]


def test_markdown_chunks_carry_their_heading_paths():
    doc = parse_document("guide.md", MARKDOWN.encode())

    chunks = chunk_document(doc, ChunkingConfig(chunk_size=60, chunk_overlap=10))

    def path_of(needle: str) -> tuple[str, ...]:
        return next(c.heading_path for c in chunks if needle in c.content)

    assert path_of("Preface") == ()
    assert path_of("Run the installer") == ("Install",)
    assert path_of("# this is a shell comment") == ("Install",)
    assert path_of("Use apt") == ("Install", "Linux")
    assert path_of("Debian notes") == ("Install", "Linux", "Debian")
    assert path_of("Call it") == ("Usage",)
    assert_chunk_invariants(doc, chunks, ChunkingConfig(60, 10))


def test_html_chunks_carry_their_heading_paths():
    doc = parse_document("manual.html", HTML_PAGE.encode())
    chunks = chunk_document(doc, ChunkingConfig())
    assert [(c.heading_path, c.content.split("\n")[0]) for c in chunks] == [
        ((), "Home | Docs"),
        (("Getting started",), "Getting started"),
        (("Getting started", "Configuration"), "Configuration"),
        (("Getting started", "Usage"), "Usage"),
        (("Reference",), "Reference"),
    ]


def test_docx_chunks_carry_their_heading_paths():
    doc = parse_document("report.docx", build_docx())
    chunks = chunk_document(doc, ChunkingConfig())
    assert [(c.heading_path, c.content.split("\n")[0]) for c in chunks] == [
        (("Report 2024",), "Report 2024"),
        (("Report 2024", "Sales"), "Sales"),
        (("Report 2024", "Sales", "Europe"), "Europe"),
        (("Report 2024", "Costs"), "Costs"),
    ]


def test_pdf_chunks_carry_their_page_numbers():
    page_one = [f"Page one sentence {i} about the first topic." for i in range(12)]
    page_three = [f"Page three sentence {i} about another topic." for i in range(12)]
    doc = parse_document("book.pdf", build_pdf([page_one, [], page_three]))
    config = ChunkingConfig(chunk_size=200, chunk_overlap=50)

    chunks = chunk_document(doc, config)

    assert {c.page for c in chunks} == {1, 3}
    assert len(chunks) > 4
    for chunk in chunks:
        assert f"Page {'one' if chunk.page == 1 else 'three'} sentence" in chunk.content
        assert ("one" in chunk.content) != ("three" in chunk.content)
    assert_chunk_invariants(doc, chunks, config)


def test_csv_rows_are_packed_whole_into_chunks():
    rows = "\n".join(f"Product {i},{i * 3} EUR,In stock" for i in range(50))
    doc = parse_document("stock.csv", f"name,price,status\n{rows}\n".encode())

    chunks = chunk_document(doc, ChunkingConfig(chunk_size=200, chunk_overlap=0))

    assert 1 < len(chunks) < 50
    for chunk in chunks:
        lines = chunk.content.split("\n")
        assert len(lines) > 1
        assert all(
            line.startswith("name: Product ") and line.endswith("status: In stock")
            for line in lines
        )


def test_document_without_sections_is_chunked_whole():
    chunks = chunk_document(plain("  Alpha.\n\nBeta.  "), ChunkingConfig())
    assert [(c.content, c.start, c.end, c.page, c.heading_path) for c in chunks] == [
        ("Alpha.\n\nBeta.", 2, 15, None, ())
    ]


def test_whitespace_only_document_has_no_chunks():
    assert chunk_document(plain(" \n\n\u3000\t"), ChunkingConfig()) == []


@pytest.mark.parametrize(("size", "overlap"), [(0, 0), (-5, 0), (100, 100), (100, -1), (10, 20)])
def test_invalid_configuration_is_refused(size, overlap):
    with pytest.raises(ValueError, match="chunk_"):
        ChunkingConfig(chunk_size=size, chunk_overlap=overlap)


def test_defaults_are_800_characters_with_120_of_overlap():
    assert ChunkingConfig() == ChunkingConfig(chunk_size=800, chunk_overlap=120)


def mixed_text(length: int) -> str:
    rng = random.Random(0)
    parts, total = [], 0
    while total < length:
        part = rng.choice([*ENGLISH, *CHINESE, *CHINESE, "\n", "\n\n"])
        parts.append(part)
        total += len(part)
    return "".join(parts)


def counted_calls(doc) -> tuple[int, list]:
    """The function calls chunking ``doc`` makes (a count, not a time: the same on any
    machine, however loaded), and the chunks."""
    profiler = cProfile.Profile()
    profiler.enable()
    chunks = chunk_document(doc, ChunkingConfig())
    profiler.disable()
    return pstats.Stats(profiler).total_calls, chunks


def test_a_megabyte_of_mixed_text_is_chunked_in_linear_time():
    small = parse_document("small.txt", mixed_text(100_000).encode())
    doc = parse_document("big.txt", mixed_text(1_000_000).encode())
    small_calls, _ = counted_calls(small)
    calls, chunks = counted_calls(doc)
    # Ten times the text takes about ten times the calls; a chunker doing quadratic work in
    # Python would take about a hundred times.
    assert calls < 15 * small_calls, (calls, small_calls)
    assert_chunk_invariants(doc, chunks, ChunkingConfig())
