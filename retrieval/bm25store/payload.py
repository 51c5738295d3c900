"""The stored form of an index in L2 and L3: zlib-compressed, HMAC-signed, bound to its KB.

The signature is an HMAC-SHA256 under a key derived from SECRET_KEY (Django's ``salted_hmac``
with a salt of its own), over the KB's identity (tenant id, KB id, creation time) and version
followed by the exact stored bytes. Binding identity and version means a valid payload copied
to another KB's key, or relabelled with another version, fails the check like a flipped byte
does. Verification accepts
``SECRET_KEY_FALLBACKS`` too, so rotating the key does not throw every cached index away.

A payload is unpickled only after its signature checked out (``BM25Index.from_bytes`` unpickles).
"""

from __future__ import annotations

import hmac
import zlib
from dataclasses import dataclass

from django.conf import settings
from django.utils.crypto import salted_hmac

from retrieval.bm25 import BM25Index

_SALT = "retrieval.bm25store.payload"
# zlib level 1: every level inflates at the same speed (the output size sets the cost), and
# higher levels shrink the payload little while a rebuild pays their compression time.
PAYLOAD_ZLIB_LEVEL = 1


class PayloadRejected(Exception):
    """The signature does not match: the payload was altered and must not be unpickled."""


class PayloadUnreadable(Exception):
    """Signed by us but not loadable here (e.g. an older index format after an upgrade)."""


@dataclass(frozen=True)
class Identity:
    """Which knowledge base an entry belongs to. ``epoch`` (its creation time in microseconds)
    tells apart two KBs that had the same id in two lives of a database (a test database made
    afresh, a database recreated in development) while Redis kept the older one's entries."""

    tenant_id: int
    knowledge_base_id: int
    epoch: int


@dataclass(frozen=True)
class SignedPayload:
    """What L2 and L3 hold for one knowledge base."""

    version: int
    signature: str  # hex HMAC-SHA256
    data: bytes  # zlib-compressed BM25Index.to_bytes()


def sign(identity: Identity, version: int, data: bytes, secret: str | None = None) -> str:
    head = f"{identity.tenant_id}:{identity.knowledge_base_id}:{identity.epoch}:{version}:"
    mac = salted_hmac(_SALT, head, secret, algorithm="sha256")
    mac.update(data)
    return mac.hexdigest()


def seal(identity: Identity, version: int, index: BM25Index) -> SignedPayload:
    data = zlib.compress(index.to_bytes(), PAYLOAD_ZLIB_LEVEL)
    return SignedPayload(version, sign(identity, version, data), data)


def verify(identity: Identity, payload: SignedPayload) -> None:
    """Raise PayloadRejected unless the signature is ours (current key or a fallback)."""
    for secret in (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())):
        expected = sign(identity, payload.version, payload.data, secret)
        if hmac.compare_digest(expected, payload.signature):
            return
    raise PayloadRejected


def open_payload(identity: Identity, payload: SignedPayload) -> BM25Index:
    """Verify, then decompress and load. Raises PayloadRejected or PayloadUnreadable."""
    verify(identity, payload)
    try:
        return BM25Index.from_bytes(zlib.decompress(payload.data))
    except (zlib.error, ValueError) as exc:
        raise PayloadUnreadable(str(exc)) from exc
