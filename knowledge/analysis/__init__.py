"""Text analysis shared by ingestion and queries: normalise, segment (jieba for Han), stem.

See :mod:`knowledge.analysis.analyzer` for the pipeline,
:mod:`knowledge.analysis.identifiers` for when a compound such as ``v2.3.1`` is kept whole, and
:mod:`knowledge.analysis.scripts` for which writing systems (Han, Latin, kana...) a text is
written in.
Pure Python; nothing here imports Django.
"""

from knowledge.analysis.analyzer import (
    ANALYZER_VERSION,
    Analyzer,
    AnalyzerConfig,
    get_analyzer,
)
from knowledge.analysis.identifiers import MAX_TOKEN_CHARS
from knowledge.analysis.normalization import normalize

__all__ = [
    "ANALYZER_VERSION",
    "MAX_TOKEN_CHARS",
    "Analyzer",
    "AnalyzerConfig",
    "get_analyzer",
    "normalize",
]
