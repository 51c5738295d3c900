"""The text analyser: what BM25 sees of documents and queries (pure Python, no database)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import unicodedata
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jieba
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from knowledge.analysis import (
    MAX_TOKEN_CHARS,
    Analyzer,
    AnalyzerConfig,
    chinese,
    get_analyzer,
    normalize,
)
from tests.conftest import CEILING_S

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def analyzer() -> Analyzer:
    return Analyzer()


def matches(query: str, document: str, analyzer: Analyzer) -> set[str]:
    """The query tokens a document shares, as BM25 would score them."""
    return set(analyzer.tokens(query)) & set(analyzer.tokens(document))


# --- English -------------------------------------------------------------------------------


def test_english_is_stemmed_and_stopwords_dropped(analyzer):
    tokens = analyzer.tokens("The Running Dogs ran quickly")
    assert {"run", "dog", "quick"} <= set(tokens)
    assert "the" not in tokens
    assert "running" not in tokens


def test_stopwords_are_checked_before_stemming(analyzer):
    # "doing" is a stopword; stemmed first it would become "do" and survive as "do" elsewhere.
    assert analyzer.tokens("doing being having") == []
    assert analyzer.tokens("Dogs") == analyzer.tokens("dog")


def test_stemming_and_stopwords_can_be_turned_off():
    plain = Analyzer(AnalyzerConfig(stem=False, stopwords=False))
    assert plain.tokens("The Running Dogs") == ["the", "running", "dogs"]


def test_only_latin_words_are_stemmed(analyzer):
    assert analyzer.tokens("Cafés running") == ["café", "run"]
    # Russian and Greek are kept as written (lowercased), not cut by English rules.
    assert analyzer.tokens("Москва ἀγάπη") == ["москва", "ἀγάπη"]
    assert analyzer.tokens("2024 3.14") == ["2024", "3", "14", "3.14"]


# --- Chinese -------------------------------------------------------------------------------


def test_chinese_is_segmented_into_words_without_stopwords(analyzer):
    tokens = analyzer.tokens("我们在研究传感器的温度数据")
    assert {"传感器", "温度", "数据", "研究"} <= set(tokens)
    assert not {"的", "我们", "在"} & set(tokens)


def test_search_mode_emits_sub_words_of_long_words(analyzer):
    tokens = analyzer.tokens("中华人民共和国")
    assert {"中华人民共和国", "中华", "人民", "共和国"} <= set(tokens)
    assert matches("人民", "中华人民共和国成立", analyzer) == {"人民"}


def test_chinese_and_english_mixed_without_spaces(analyzer):
    tokens = analyzer.tokens("使用Python编写的Running程序")
    assert tokens == ["使用", "python", "编写", "run", "程序"]


# --- identifiers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "whole", "parts"),
    [
        ("TH01", "th01", {"th01"}),
        ("v2.3.1", "v2.3.1", {"v2", "3", "1"}),
        ("传感器-温度-TH01", "传感器-温度-th01", {"传感器", "温度", "th01"}),
        ("user_id", "user_id", {"user", "id"}),
        ("ISO-9001", "iso-9001", {"iso", "9001"}),
        ("foo.bar", "foo.bar", {"foo", "bar"}),
        ("src/main", "src/main", {"src", "main"}),
        ("a/b", "a/b", {"b"}),  # "a" is a stopword; the whole form still finds "a/b"
        ("传感器-temp", "传感器-temp", {"传感器", "temp"}),
        ("config.yaml", "config.yaml", {"config", "yaml"}),
    ],
)
def test_identifiers_keep_their_whole_form_and_their_parts(analyzer, text, whole, parts):
    tokens = analyzer.tokens(f"Please check {text}, then restart.")
    assert whole in tokens
    assert parts <= set(tokens)
    # The exact name and any part of it, typed as a query, meet the document.
    document = f"Please check {text}, then restart."
    assert whole in matches(text, document, analyzer)
    for part in parts:
        assert part in matches(part.upper(), document, analyzer)


def test_whole_identifier_is_not_stemmed(analyzer):
    assert "running_jobs" in analyzer.tokens("running_jobs")
    assert {"run", "job"} <= set(analyzer.tokens("running_jobs"))


def test_hyphenated_prose_is_not_kept_whole(analyzer):
    assert analyzer.tokens("a state-of-the-art X-ray") == ["state", "art", "x", "ray"]
    assert analyzer.tokens("温度-湿度") == ["温度", "湿度"]


def test_sentence_punctuation_does_not_make_identifiers(analyzer):
    tokens = analyzer.tokens("It ran to the end. Next, release v2.3.1. Done.")
    assert "v2.3.1" in tokens
    assert [token for token in tokens if "." in token] == ["v2.3.1"]
    assert analyzer.tokens("--verbose __init__") == ["verbos", "init"]


def test_han_and_latin_without_joiner_is_not_an_identifier(analyzer):
    assert all(
        "温度" not in token or token == "温度" for token in analyzer.tokens("温度TH01传感器")
    )


# --- robustness ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("'; DROP TABLE x; --", ["drop", "tabl", "x"]),
        ("a & !b | c:*", ["b", "c"]),
        ("温度\x00数据\x00\x00", ["温度", "数据"]),
        ("abc\ud800def\udfff", ["abc", "def"]),
        ("传感器😀TH01🇨🇳❤️", ["传感", "感器", "传感器", "th01"]),
        ("ＴＨ０１　ｓｅｎｓｏｒ", ["th01", "sensor"]),
        ("co\u00adoperate zero\u200bwidth", ["cooper", "zerowidth"]),
        ("नमस्ते दुनिया", ["नमस्ते", "दुनिया"]),
        ("", []),
        ("  \n\t ... --- !!! ", []),
    ],
)
def test_odd_input_gives_sensible_tokens(analyzer, text, expected):
    assert analyzer.tokens(text) == expected


def test_normalize_folds_forms_and_removes_what_cannot_be_stored():
    assert normalize("ＴＨ０１ Straße ﬁle") == "th01 strasse file"
    assert normalize("a\x00b\ud800c\u200bd") == "a b cd"
    assert normalize("a\x00b\ud800c").encode("utf-8") == b"a b c"


def test_large_mixed_input(analyzer):
    text = ("Sensor TH01 测量温度数据 v2.3.1 😀 'quoted' \x00 " * 2000)[:100_000]
    tokens = analyzer.tokens(text)
    assert tokens.count("th01") >= 1900
    assert tokens.count("温度") >= 1900


def test_long_runs_are_bounded(analyzer):
    assert analyzer.tokens("x" * (MAX_TOKEN_CHARS + 1)) == []
    digest = "ab" * 32
    assert analyzer.tokens(f"sha256 {digest}") == ["sha256", digest]
    # A wall of Han characters with no dictionary word in it: jieba alone is quadratic here.
    assert len(analyzer.tokens("中" * 100_000)) > 90_000


# --- chunk tokens --------------------------------------------------------------------------


def test_chunk_tokens_include_title_and_heading_path(analyzer):
    tokens = analyzer.chunk_tokens(
        "Connect the red wire first.",
        title="TH01 Sensor Manual",
        heading_path=["安装指南", "Wiring"],
    )
    assert {"th01", "sensor", "manual", "安装", "指南", "wire", "connect", "red"} <= set(tokens)
    assert tokens[:3] == ["th01", "sensor", "manual"]


def test_chunk_heading_repeating_the_title_is_counted_once(analyzer):
    tokens = analyzer.chunk_tokens("body", title="Sensor Manual", heading_path=["sensor  manual"])
    assert tokens == ["sensor", "manual", "bodi"]
    assert analyzer.chunk_tokens("body", heading_path="Setup") == ["setup", "bodi"]


# --- user words ----------------------------------------------------------------------------


def test_user_words_segment_differently_and_stay_partially_searchable():
    default = get_analyzer()
    custom = get_analyzer(["石墨烯电池", "传感器温度"])
    text = "新型石墨烯电池的传感器温度很高"
    assert "石墨烯电池" not in default.tokens(text)
    tokens = custom.tokens(text)
    assert {"石墨烯电池", "传感器温度"} <= set(tokens)
    assert {"石墨", "电池", "传感器", "温度", "新型"} <= set(tokens)
    assert tokens.count("石墨烯电池") == 1
    assert "电池" in matches("电池", text, custom)


def test_user_words_do_not_touch_other_analysers_or_global_jieba():
    before_jieba = jieba.lcut("石墨烯电池和传感器温度")
    before_default = Analyzer().tokens("石墨烯电池和传感器温度")
    custom = Analyzer(AnalyzerConfig(user_words=("石墨烯电池", "传感器温度")))
    assert "石墨烯电池" in custom.tokens("石墨烯电池和传感器温度")
    assert jieba.lcut("石墨烯电池和传感器温度") == before_jieba
    assert Analyzer().tokens("石墨烯电池和传感器温度") == before_default
    assert get_analyzer().tokens("石墨烯电池和传感器温度") == before_default
    assert "石墨烯电池" not in jieba.dt.FREQ


def test_latin_user_words_respect_word_boundaries():
    custom = get_analyzer(["wifi模块", "AI", "x-ray"])
    tokens = custom.tokens("The AI芯片 uses a WiFi模块; X-ray too")
    assert {"wifi模块", "wifi", "模块", "ai", "芯片", "x-ray"} <= set(tokens)
    assert "x-ray" not in get_analyzer().tokens("X-ray")
    # "ai" inside a longer Latin word is not the user word, on either side.
    assert custom.tokens("said") == ["said"]
    assert custom.tokens("Thai芯片") == ["thai", "芯片"]
    assert custom.tokens("芯片aid") == ["芯片", "aid"]


def test_user_words_prefer_the_longest_match_and_count_once():
    custom = get_analyzer(["传感器", "传感器温度"])
    assert custom.tokens("传感器温度计")[0] == "传感器温度"
    # jieba also knows 传感器; the user word must not be counted twice for one occurrence.
    assert custom.tokens("传感器").count("传感器") == 1


def test_unusable_user_words_are_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="knowledge.analysis.userwords"):
        custom = Analyzer(AnalyzerConfig(user_words=("c++", "machine learning", "石墨烯电池")))
    assert "'c++'" in caplog.text
    assert "'machine learning'" in caplog.text
    assert custom.tokens("c++ 石墨烯电池")[:2] == ["c", "石墨烯电池"]


def test_get_analyzer_is_shared_per_distinct_word_set():
    first = get_analyzer(["石墨烯电池", "传感器温度"])
    assert get_analyzer(["传感器温度", " 石墨烯电池 ", "传感器温度"]) is first
    assert get_analyzer(["石墨烯电池"]) is not first
    assert get_analyzer() is get_analyzer([])
    with pytest.raises(TypeError):
        get_analyzer("石墨烯电池")


# --- jieba loading -------------------------------------------------------------------------


@pytest.fixture
def without_jieba(monkeypatch):
    monkeypatch.setitem(sys.modules, "jieba", None)  # makes `import jieba` fail
    chinese.reset_jieba()
    yield
    chinese.reset_jieba()


def test_missing_jieba_falls_back_to_single_characters(without_jieba, caplog):
    with caplog.at_level(logging.WARNING, logger="knowledge.analysis.chinese"):
        tokens = Analyzer().tokens("传感器的温度 TH01")
        Analyzer().tokens("再来一次")
    assert tokens == ["传", "感", "器", "温", "度", "th01"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["jieba unavailable, Chinese text falls back to single-character tokens"]


def test_jieba_loads_without_printing_to_stderr():
    code = (
        "from knowledge.analysis import get_analyzer; "
        "print(get_analyzer().tokens('我们在研究传感器'))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # -W ignore: newer setuptools warns when jieba imports pkg_resources; that is not log noise.
    result = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=CEILING_S,
    )
    assert result.returncode == 0, result.stderr
    assert "研究" in result.stdout
    assert result.stderr == ""


def test_concurrent_first_use_gives_the_same_tokens():
    texts = [f"传感器TH0{i} running 温度数据 state-of-the-art v{i}.0" for i in range(16)]
    expected = [Analyzer().tokens(text) for text in texts]
    chinese.reset_jieba()
    shared = Analyzer()
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(shared.tokens, texts * 20)) == expected * 20


# --- properties ----------------------------------------------------------------------------

_texts = st.text(
    st.one_of(
        st.characters(),
        st.characters(categories=["Cs", "Cc", "Cf", "Mn"]),
        st.sampled_from(list("传感器温度数据的了中华人民共和国TH01AIv-_./ \n'&|!:*\u0301")),
    ),
    max_size=200,
)


_USER_WORDS = ("传感器温度", "传感器", "ai", "x-ray", "中华", "th01")


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_texts, st.sampled_from([(), _USER_WORDS]))
@example("传感器\u0301th", _USER_WORDS)  # a mark right after a user word
def test_any_text_gives_clean_deterministic_tokens(text, user_words):
    analyzer = get_analyzer(user_words)
    tokens = analyzer.tokens(text)
    assert all(isinstance(token, str) and token for token in tokens)
    assert not any(char.isspace() for token in tokens for char in token)
    # Every token starts with a letter or digit: no stray punctuation or combining mark.
    assert all(token[0].isalnum() for token in tokens)
    assert all(len(token) <= MAX_TOKEN_CHARS for token in tokens)
    # Stored in PostgreSQL text[]: a lone surrogate there would fail the whole chunk.
    assert all(token.encode("utf-8") for token in tokens)
    assert analyzer.tokens(text) == tokens
    assert Analyzer(AnalyzerConfig(user_words=user_words)).tokens(text) == tokens


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_texts, st.sampled_from(["NFC", "NFD", "NFKC", "NFKD"]))
def test_unicode_equivalent_texts_give_the_same_tokens(text, form):
    analyzer = get_analyzer()
    assert analyzer.tokens(unicodedata.normalize(form, text)) == analyzer.tokens(text)


@settings(deadline=None)
@given(st.from_regex(r"[a-z]{1,5}[0-9]{1,3}(?:[-_./][a-z0-9]{1,5}){1,3}", fullmatch=True))
def test_any_identifier_with_a_digit_is_kept_whole(identifier):
    assert identifier in get_analyzer().tokens(f"see {identifier.upper()}. now")


# --- Japanese and Korean: kana and Hangul runs as character bigrams (Lucene's CJKBigramFilter)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("カタカナ", ["カタ", "タカ", "カナ"]),
        ("ｶﾀｶﾅ", ["カタ", "タカ", "カナ"]),  # half-width katakana, made full-width by NFKC
        ("ひらがな", ["ひら", "らが", "がな"]),
        ("한국어 문서", ["한국", "국어", "문서"]),
        ("を", ["を"]),  # a lone character stays a unigram
        ("東京タワーに行く", ["東京", "タワ", "ワー", "ーに", "行", "く"]),  # Han stays with jieba
        ("TH01のセンサー", ["th01", "のセ", "セン", "ンサ", "サー"]),
        ("pump ポンプ 펌프 泵", ["pump", "ポン", "ンプ", "펌프", "泵"]),
    ],
)
def test_kana_and_hangul_runs_become_bigrams(text, expected):
    assert Analyzer().tokens(text) == expected


def test_a_japanese_or_korean_word_matches_inside_a_longer_run():
    analyzer = Analyzer()
    document = set(analyzer.tokens("ポンプのメンテナンスマニュアル 펌프유지보수설명서"))
    for query in ("メンテナンス", "마니", "유지보수"):
        terms = set(analyzer.tokens(query))
        if query == "마니":  # not in the text: no bigram of it matches
            assert not terms & document
        else:
            assert terms <= document


# --- Traditional and Simplified Chinese ----------------------------------------------------


def test_traditional_and_simplified_give_the_same_tokens(analyzer):
    assert analyzer.tokens("傳感器校準") == analyzer.tokens("传感器校准")
    assert analyzer.tokens("傳感器校準") == ["传感", "感器", "传感器", "校准"]
    assert analyzer.tokens("傳感器校準週期是多久") == analyzer.tokens("传感器校准周期是多久")


def test_phrases_decide_the_simplified_form(analyzer):
    # 乾 is 干 in 乾燥 (dry) but stays in the name 乾隆; 髮 and 發 both become 发.
    assert analyzer.tokens("乾燥") == analyzer.tokens("干燥")
    assert "乾隆" in analyzer.tokens("乾隆皇帝")
    assert analyzer.tokens("頭髮") == analyzer.tokens("头发")


def test_traditional_mixed_with_english_folds_only_the_han(analyzer):
    tokens = analyzer.tokens("TH01 傳感器 Calibration 週期 v2.3.1")
    assert tokens == ["th01", "传感", "感器", "传感器", "calibr", "周期", "v2", "3", "1", "v2.3.1"]
    assert analyzer.tokens("TH01傳感器的校準") == analyzer.tokens("TH01传感器的校准")


def test_japanese_with_kana_is_not_folded(analyzer):
    # 東 and 気 are Japanese forms here, not Traditional Chinese to be simplified.
    assert analyzer.tokens("東京の天気") == ["東京", "の", "天", "気"]
    assert Analyzer.fold("東京の天気") == "東京の天気"
    assert Analyzer.fold("東京天氣") == "东京天气"
    # A chunk with kana anywhere keeps its kanji-only title as written.
    tokens = analyzer.chunk_tokens("東京の天気は晴れ", title="東京")
    assert "东京" not in tokens and tokens.count("東京") == 2


def test_traditional_user_words_meet_simplified_text():
    analyzer = Analyzer(AnalyzerConfig(user_words=("校準器",)))
    assert analyzer.tokens("校准器") == analyzer.tokens("校準器") == ["校准器", "校准"]
