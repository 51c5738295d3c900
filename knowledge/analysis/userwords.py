"""A knowledge base's own vocabulary (``user_words``), matched before jieba sees the text.

Domain terms such as ``传感器温度`` or ``石墨烯电池`` are not in jieba's dictionary and come out in
pieces. jieba's own remedies do not fit a multi-tenant service: ``jieba.add_word`` and
``load_userdict`` change the process-wide tokenizer, so one knowledge base's words would change
every other one's tokens (and their stored chunks would stop matching their queries), while a
private ``jieba.Tokenizer`` per knowledge base loads another copy of the prefix dictionary, tens of
MB each. Instead the words compile into one regular expression shaped like a trie, which finds the
leftmost, then longest, user word in a word of text; only the text between matches goes to the
shared jieba.

Which user words are accepted, after the same normalisation as any text:

- letters, digits and Han without joiners (``传感器温度``, ``wifi模块``, ``5g网络``): matched
  inside any word. An edge that is a non-Han letter or digit must sit on a script boundary, so
  ``ai`` matches in ``ai芯片`` but not inside ``said``;
- compounds with joiners (``x-ray``, ``pm2.5``): a compound equal to one is always kept whole,
  even where the identifier rule would not keep it;
- anything else (spaces, symbols as in ``c++``) can never come out as one token; it is ignored
  with a warning.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator

from knowledge.analysis.chinese import to_simplified
from knowledge.analysis.identifiers import COMPOUND_RE, MAX_TOKEN_CHARS, WORD_RE
from knowledge.analysis.normalization import HAN, MARKS, normalize
from knowledge.analysis.scripts import has_kana

logger = logging.getLogger(__name__)

# A letter, digit or combining mark of any script but Han: where user words need a boundary.
_NON_HAN_WORD_CHAR = rf"(?:[^\W_{HAN}]|[{MARKS}])"
_NON_HAN_WORD_CHAR_RE = re.compile(_NON_HAN_WORD_CHAR)
_NOT_AFTER_WORD = rf"(?<!{_NON_HAN_WORD_CHAR})"
_NOT_BEFORE_WORD = rf"(?!{_NON_HAN_WORD_CHAR})"
# A combining mark changes the character before it, so no user word ends in front of one.
_NOT_BEFORE_MARK = rf"(?![{MARKS}])"

_Trie = dict[str, "_Trie"]


class UserDictionary:
    """The compiled user words of one analyser."""

    def __init__(self, words: Iterable[str]) -> None:
        inline: set[str] = set()
        joined: set[str] = set()
        ignored: list[str] = []
        for raw in words:
            word = normalize(raw).strip()
            if not has_kana(word):
                word = to_simplified(word)  # as the analyser folds the text it meets
            if len(word) > MAX_TOKEN_CHARS:
                ignored.append(raw)
            elif WORD_RE.fullmatch(word):
                inline.add(word)
            elif COMPOUND_RE.fullmatch(word):
                joined.add(word)
            elif word:
                ignored.append(raw)
        if ignored:
            logger.warning(
                "user words ignored (a token has no spaces or symbols and at most %d characters):"
                " %s",
                MAX_TOKEN_CHARS,
                ", ".join(map(repr, ignored)),
            )
        self.words: tuple[str, ...] = tuple(sorted(inline | joined))
        self.joined: frozenset[str] = frozenset(joined)
        self._pattern = re.compile(_trie_pattern(inline)) if inline else None

    def split(self, word: str) -> Iterator[tuple[str, bool]]:
        """Cut a word into ``(segment, is_user_word)`` pairs that cover it in order."""
        if self._pattern is None:
            yield word, False
            return
        pos = 0
        for match in self._pattern.finditer(word):
            if match.start() > pos:
                yield word[pos : match.start()], False
            yield match.group(), True
            pos = match.end()
        if pos < len(word):
            yield word[pos:], False


def _trie_pattern(words: Iterable[str]) -> str:
    root: _Trie = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}
    return _node_pattern(root, last="")


def _node_pattern(node: _Trie, last: str) -> str:
    """Regex for the rest of the words below ``node``; ``last`` is the character just matched."""
    branches = []
    for char, child in sorted(node.items()):
        if not char:
            continue
        head = re.escape(char)
        if not last and _NON_HAN_WORD_CHAR_RE.match(char):
            head = _NOT_AFTER_WORD + head
        branches.append(head + _node_pattern(child, last=char))
    if "" in node:
        # Ending here is the last alternative, so a longer word wins when it also matches.
        branches.append(_NOT_BEFORE_WORD if _NON_HAN_WORD_CHAR_RE.match(last) else _NOT_BEFORE_MARK)
    return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"
