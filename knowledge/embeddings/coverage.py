"""Which writing systems an embedding model embeds meaningfully.

An embedding model trained on English puts Chinese text at points that say little about its
meaning: fused with a keyword leg that reads Chinese well, such a vector leg only adds noise. So
every model declares the scripts it covers, and a query mostly in scripts its knowledge base's
model does not cover is searched without the vector leg (``retrieval.search.options``).

Scripts, not languages (``knowledge.analysis.scripts`` tells which a text is written in): an
English-only model is as lost in Chinese as in Japanese or Russian. A model's coverage is a
frozenset of ``Script``; ``ALL`` for multilingual models and for ones nothing is known about
(the safe side: the vector leg stays on).

Pure: no Django.
"""

from __future__ import annotations

import re

from knowledge.analysis.scripts import Script

ALL: frozenset[Script] = frozenset(Script)
LATIN_ONLY: frozenset[Script] = frozenset({Script.LATIN})

# Models known to embed one script only, by the last part of their name (a local model is named
# by its directory), lower-cased. Sentence-transformers' English models and the "-en" families.
_ENGLISH_ONLY = re.compile(
    r"^(all-minilm-l6-v2|all-minilm-l12-v2|all-mpnet-base-v2|all-distilroberta-v1"
    r"|multi-qa-minilm-l6-cos-v1|multi-qa-mpnet-base-dot-v1|paraphrase-minilm-l6-v2"
    r"|msmarco-.*|.*-en|.*-en-v[0-9.]+|.*\.en)$"
)


def parse_scripts(declared: str) -> frozenset[Script] | None:
    """A knowledge base's declaration: ``*`` (all), a comma-separated list of scripts, or
    empty (None: the model's own declaration). Raises ValueError naming what is unknown."""
    text = declared.strip().lower()
    if not text:
        return None
    if text == "*":
        return ALL
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in Script.__members__.values()]
    if unknown:
        choices = ", ".join(s.value for s in Script)
        raise ValueError(f"unknown script {unknown[0]!r}; use * or some of: {choices}")
    return frozenset(Script(name) for name in names)


def model_coverage(provider: str, model: str) -> frozenset[Script]:
    """What a provider's model is known to cover: English-only models the Latin script,
    everything else (multilingual models, unknown ones, the non-semantic ``hash``) all."""
    if provider not in ("local", "openai", "langchain"):
        return ALL
    name = model.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1].lower()
    return LATIN_ONLY if _ENGLISH_ONLY.match(name) else ALL


def coverage(provider: str, model: str, declared: str = "") -> frozenset[Script]:
    """A knowledge base's coverage: its own declaration when it has one, else its model's."""
    return parse_scripts(declared) or model_coverage(provider, model)


def describe(scripts: frozenset[Script]) -> str:
    """``*`` or the scripts in a fixed order, for traces and messages."""
    if scripts == ALL:
        return "all scripts"
    return ", ".join(s.value for s in Script if s in scripts)
