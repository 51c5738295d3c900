"""Highlighting of query terms in hit text: words whose analysed form is a query term, and
nothing else; the text itself is never changed (no database)."""

import itertools

from knowledge.analysis import get_analyzer
from retrieval.admin.highlight import highlight


def marked(content: str, query: str, user_words=()) -> list[str]:
    segments = highlight(content, query, get_analyzer(user_words))
    assert "".join(text for text, _ in segments) == content
    assert all(a[1] != b[1] for a, b in itertools.pairwise(segments))
    return [text for text, matched in segments if matched]


def test_english_words_match_through_stemming_and_case():
    content = "The TH01 sensor is Calibrated every six months; calibration takes an hour."
    assert marked(content, "th01 calibrating") == ["TH01", "Calibrated", "calibration"]


def test_stopwords_and_partial_words_are_not_marked():
    assert marked("The pumping station and the pump house", "the pump") == ["pumping", "pump"]
    assert marked("Sensors and censorship", "sensor") == ["Sensors"]


def test_chinese_words_are_cut_by_jieba_and_matched_by_their_analysed_parts():
    content = "温度传感器每六个月校准一次。校准时使用标准温度计。"
    assert marked(content, "传感器 校准") == ["温度传感器", "校准", "校准"]


def test_identifiers_match_whole_and_by_the_parts_bm25_also_matched():
    content = "Install v2.3.1 (not v2.3.0) with a state-of-the-art pump."
    # the query's tokens are v2, 3, 1 and v2.3.1: v2.3.0 shares v2 and 3, and BM25 counts them
    assert marked(content, "v2.3.1") == ["v2.3.1", "v2", "3"]
    assert marked(content, "art") == ["art"]


def test_a_query_without_terms_marks_nothing_and_markup_stays_text():
    content = "<script>alert('TH01')</script>"
    assert marked(content, "the and of") == []
    assert marked(content, "TH01") == ["TH01"]  # the template escapes the segments


def test_a_query_in_one_chinese_script_marks_the_words_it_matched_in_the_other():
    simplified = "传感器的校准周期是一年。"
    traditional = "傳感器的校準週期是一年。"
    assert marked(simplified, "傳感器校準週期") == ["传感器", "校准周期"]
    assert marked(traditional, "传感器校准周期") == ["傳感器", "校準週期"]
    assert marked(traditional, "校準") == ["校準"]
