"""Correcting a query's unknown words against a knowledge base's vocabulary: pure, on small
hand-made indexes analysed as documents are."""

from __future__ import annotations

from knowledge.analysis import Analyzer
from retrieval.bm25 import Segment, SegmentedIndex
from retrieval.search.spelling import Correction, corrected_tokens, corrections

ANALYZER = Analyzer()
TEXTS = [
    "The calibration of the temperature sensor takes place every six months.",
    "Calibration certificates are kept with the maintenance records.",
    "The centrifugal pump moves cooling water; replace the mechanical seal when it drips.",
    "Calibrated thermometers and a constant temperature bath.",
    "传感器每六个月校准一次。",
    "The celebration ended late.",
]
INDEX = SegmentedIndex(
    [Segment.build(list(range(1, len(TEXTS) + 1)), [ANALYZER.tokens(t) for t in TEXTS])]
)


def fixes(query: str) -> dict[str, tuple[str, ...]]:
    return {fix.word: fix.terms for fix in corrections(query, ANALYZER, INDEX)}


def test_one_edit_is_corrected_through_the_analyser():
    assert fixes("calibartion of the sensor") == {"calibartion": ("calibr",)}  # transposition
    assert fixes("temprature") == {"temprature": ("temperatur",)}  # deletion
    assert fixes("mechanicall seal") == {"mechanicall": ("mechan",)}  # insertion
    assert fixes("centrifugel pump") == {"centrifugel": ("centrifug",)}  # substitution


def test_the_most_frequent_candidate_wins():
    # "calebration" is one edit from both "celebration" (1 document) and "calibration" (the
    # stem calibr is in 3 documents).
    assert fixes("calebration") == {"calebration": ("calibr",)}


def test_known_short_and_uncorrectable_words_are_left_alone():
    assert fixes("calibration of the temperature sensor") == {}
    assert fixes("pmup sael") == {}  # under five letters: too easy to make another word
    assert fixes("xylophones") == {}  # nothing within reach


def test_two_edits_only_from_nine_letters():
    assert fixes("tempratrue") == {"tempratrue": ("temperatur",)}  # 10 letters, two edits
    assert fixes("centrfgal") == {}  # 9 letters but three edits


def test_han_words_the_vocabulary_lacks_fall_back_to_bigrams():
    # jieba keeps 一次性 whole in the query; the documents only hold 一次
    assert fixes("校准一次性") == {"一次性": ("一次",)}
    assert fixes("传感器校准周期") == {}  # 周期: neither it nor its characters are known


def test_corrected_tokens_replace_only_the_corrected_word():
    tokens = ANALYZER.tokens("calibartion of the sensor")
    fixed = corrected_tokens(tokens, [Correction("calibartion", ("calibr",))], ANALYZER)
    assert fixed == ["calibr", "sensor"]
    top = INDEX.search(fixed, 2)
    assert top[0][0] == 1  # the calibration of the sensor
