"""Words, compounds, and the rule for when a compound is also kept whole as an identifier.

A *word* is a letter or digit followed by letters, digits and combining marks (Han characters are
letters here; the analyser splits scripts later). A *compound* is a run of words joined by single
joiner characters ``-``, ``_``, ``.`` or ``/`` with no space in between: ``TH01``,
``v2.3.1``, ``传感器-温度-TH01``, ``user_id``, ``foo.bar``, ``a/b``, but also
``state-of-the-art``. A joiner must have a word on both sides, so a sentence-ending dot
(``end.``), a leading ``--flag`` dash or ``__dunder__`` underscores never join anything.

Every compound is analysed part by part, so a partial query hits. It is *also* emitted whole
(lowercased, never stemmed), so an exact-name query hits harder, when it has at least one joiner
and one of:

- a digit (``v2.3.1``, ``ISO-9001``, ``covid-19``, ``传感器-温度-TH01``);
- an ``_``, ``.`` or ``/`` joiner (``user_id``, ``foo.bar``, ``example.com``, ``a/b``): prose
  rarely glues letters with these, code, paths, hostnames and file names always do;
- Han next to another script (``传感器-temp``).

What is left out is the common prose case: letters of one script joined only by hyphens
(``state-of-the-art``, ``x-ray``, ``温度-湿度``). Their parts (``state``, ``art``; the stopwords
``of`` and ``the`` go) already match the same query analysed the same way, and a whole form
would only add rare junk terms. Han and Latin written together without a joiner
(``使用Python编写``) is ordinary mixed-script prose, not an identifier.
"""

from __future__ import annotations

import re

from knowledge.analysis.normalization import HAN, HAN_RE, MARKS

# Longer runs are encoded blobs (base64, minified code, hashes of hashes) that nobody types into a
# search box; they are dropped rather than bloat every index. A SHA-256 in hex (64) still fits.
MAX_TOKEN_CHARS = 100

_WORD = rf"[^\W_](?:[^\W_]|[{MARKS}])*"

WORD_RE = re.compile(_WORD)
# Group 1 is the first word, so ``match.end(1) == match.end()`` means "no joiner".
COMPOUND_RE = re.compile(rf"({_WORD})(?:[-_./]{_WORD})*")
JOINER_RE = re.compile(r"[-_./]")

_STRONG_JOINER_RE = re.compile(r"[_./]")
_DIGIT_RE = re.compile(r"\d")
_NON_HAN_LETTER_RE = re.compile(rf"[^\W\d_{HAN}]")


def is_identifier(compound: str) -> bool:
    """Whether a compound (one with at least one joiner) is also kept as a whole token."""
    return bool(
        _STRONG_JOINER_RE.search(compound)
        or _DIGIT_RE.search(compound)
        or (HAN_RE.search(compound) and _NON_HAN_LETTER_RE.search(compound))
    )
