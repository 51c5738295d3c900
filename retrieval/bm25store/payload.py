"""The stored form of segments and manifests in L2 and L3: zlib-compressed, HMAC-signed.

The signature (``salted_hmac`` under SECRET_KEY or one of ``SECRET_KEY_FALLBACKS``) covers the
KB's identity, a label (``s:<key>`` or ``m:<version>``) and the stored bytes: a payload copied
to another KB, key or version fails like a flipped byte. A segment is unpickled only after its
signature checked out.
"""

from __future__ import annotations

import hmac
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.conf import settings
from django.utils.crypto import salted_hmac

from retrieval.bm25.segment import Segment
from retrieval.core.identity import Identity

_SALT = "retrieval.bm25store.payload"
PAYLOAD_ZLIB_LEVEL = 1  # every level inflates at the same speed; higher ones shrink little


class PayloadRejected(Exception):
    """The signature does not match: the payload was altered and must not be unpickled."""


class PayloadUnreadable(Exception):
    """Signed by us but not loadable here (e.g. an older format after an upgrade)."""


@dataclass(frozen=True)
class SignedPayload:
    """What L2 and L3 hold for one segment (``label`` its key) or manifest (its version)."""

    label: str  # "s:<segment key>" or "m:<version>"
    signature: str  # hex HMAC-SHA256
    data: bytes  # zlib-compressed bytes of a Segment or a Manifest


def segment_label(key: str) -> str:
    return f"s:{key}"


def manifest_label(version: int) -> str:
    return f"m:{version}"


def sign(identity: Identity, label: str, data: bytes, secret: str | None = None) -> str:
    head = f"{identity.tenant_id}:{identity.knowledge_base_id}:{identity.epoch}:{label}:"
    mac = salted_hmac(_SALT, head, secret, algorithm="sha256")
    mac.update(data)
    return mac.hexdigest()


def seal(identity: Identity, label: str, raw: bytes) -> SignedPayload:
    """Compress and sign uncompressed bytes."""
    data = zlib.compress(raw, PAYLOAD_ZLIB_LEVEL)
    return SignedPayload(label, sign(identity, label, data), data)


def seal_segment(identity: Identity, key: str, segment: Segment) -> SignedPayload:
    return seal(identity, segment_label(key), segment.to_bytes())


def seal_segments(identity: Identity, segments: dict[str, Segment]) -> Iterator[SignedPayload]:
    """The segments' payloads in order; several are sealed by two threads (zlib and the HMAC
    release the GIL) while the caller writes the ones before."""
    if len(segments) < 2:
        yield from (seal_segment(identity, key, s) for key, s in segments.items())
        return
    with ThreadPoolExecutor(2, thread_name_prefix="bm25-seal") as pool:
        yield from pool.map(lambda item: seal_segment(identity, *item), segments.items())


def verify(identity: Identity, payload: SignedPayload) -> None:
    """Raise PayloadRejected unless the signature is ours (current key or a fallback)."""
    for secret in (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())):
        expected = sign(identity, payload.label, payload.data, secret)
        if hmac.compare_digest(expected, payload.signature):
            return
    raise PayloadRejected


def open_raw(identity: Identity, payload: SignedPayload) -> bytes:
    """Verify, then decompress. Raises PayloadRejected or PayloadUnreadable."""
    verify(identity, payload)
    try:
        return zlib.decompress(payload.data)
    except zlib.error as exc:
        raise PayloadUnreadable(str(exc)) from exc


def open_segment(identity: Identity, key: str, payload: SignedPayload) -> Segment:
    """Verify (as this KB's segment ``key``), then load. Raises PayloadRejected or
    PayloadUnreadable."""
    if payload.label != segment_label(key):
        raise PayloadRejected
    raw = open_raw(identity, payload)
    try:
        return Segment.from_bytes(raw)
    except ValueError as exc:
        raise PayloadUnreadable(str(exc)) from exc
