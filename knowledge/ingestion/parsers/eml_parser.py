"""E-mail messages (.eml, RFC 5322/MIME): subject, sender and recipients, the text body, and
the attachments, which become documents of their own.

Python's `email` package with the modern policy (`policy.default`) decodes the headers (RFC 2047
encoded words, RFC 2231 file names) and walks the MIME tree. The text starts with a short header
block (Subject, From, To, Cc, Date), as a mail client shows a message, so a search for a sender
finds it;
the body follows: the text/plain part, else the HTML part read as HTML pages are. Body bytes are
decoded like text files, the part's declared charset consulted after UTF-8 (a "gb2312" label is
read as GB18030, which it is in practice). metadata["email"] holds subject, from, to, cc and date
(ISO 8601) for filters; addresses are lower-cased.

Attachments are returned as they are (`ParsedDocument.attachments`): the processing service
decides which become documents (their type is detected like any upload's). A forwarded message
(message/rfc822) is an attachment named after its subject, an .eml. Parts shown inside the body
(inline images with a Content-ID, a signature logo) are not attachments. At most
ParseLimits.max_attachments are returned; the rest are listed in metadata["email"]
["attachments_over_limit"]. Encrypted messages (S/MIME, PGP/MIME) are refused with a reason.
"""

from __future__ import annotations

import email
import mimetypes
from email import policy
from email.message import EmailMessage
from email.utils import getaddresses, parsedate_to_datetime

from .base import (
    Attachment,
    FileType,
    ParsedDocument,
    ParseError,
    ParseLimits,
    TextAssembler,
    clean_inline,
    damaged,
)
from .encoding import decode_text
from .html_parser import add_html

_SEPARATORS = str.maketrans("/\\", "--")
_ENCRYPTED = frozenset(
    {"application/pkcs7-mime", "application/x-pkcs7-mime", "multipart/encrypted"}
)


def parse_eml(data: bytes, limits: ParseLimits) -> ParsedDocument:
    try:
        message = email.message_from_bytes(data, policy=policy.default)
        return _parse(message, limits)
    except (ParseError, MemoryError):
        raise
    except Exception as exc:  # malformed MIME raises from deep inside the email package
        raise damaged("e-mail message", exc) from exc


def _parse(message: EmailMessage, limits: ParseLimits) -> ParsedDocument:
    if message.get_content_type() in _ENCRYPTED:
        raise ParseError(
            "The e-mail message is encrypted (S/MIME or PGP); save or forward a decrypted copy "
            "and upload that"
        )
    subject = clean_inline(str(message.get("subject", "")))
    senders = _addresses(message, "from")
    facts: dict[str, object] = {
        "subject": subject,
        "from": senders[0][1] if senders else "",
        "to": [address for _, address in _addresses(message, "to")],
        "cc": [address for _, address in _addresses(message, "cc")],
        "date": _date(message),
    }
    assembler = TextAssembler(limits)
    header_lines = [f"Subject: {subject}"] if subject else []
    header_lines += [
        f"{name}: {', '.join(_shown(pair) for pair in pairs)}"
        for name, pairs in (
            ("From", senders),
            ("To", _addresses(message, "to")),
            ("Cc", _addresses(message, "cc")),
        )
        if pairs
    ]
    if facts["date"]:
        header_lines.append(f"Date: {facts['date']}")
    assembler.add("\n".join(header_lines))
    body = message.get_body(preferencelist=("plain", "html"))
    if body is not None:
        text = _decoded(body)
        if body.get_content_subtype() == "html":
            add_html(assembler, text)
        else:
            assembler.add(text)
    attachments = []
    over_limit = []
    for part in message.iter_attachments():
        if _shown_inline(part):
            continue
        attachment = _attachment(part)
        if len(attachments) < limits.max_attachments:
            attachments.append(attachment)
        else:
            over_limit.append(attachment.name)
    if over_limit:
        facts["attachments_over_limit"] = over_limit
    text, sections = assembler.build()
    return ParsedDocument(
        text=text,
        file_type=FileType.EML,
        title=subject or None,
        sections=sections,
        metadata={"email": facts},
        attachments=tuple(attachments),
    )


def _addresses(message: EmailMessage, header: str) -> list[tuple[str, str]]:
    values = [str(v) for v in message.get_all(header, [])]
    return [
        (clean_inline(name), address.strip().lower())
        for name, address in getaddresses(values)
        if address.strip()
    ]


def _shown(pair: tuple[str, str]) -> str:
    name, address = pair
    return f"{name} <{address}>" if name else address


def _date(message: EmailMessage) -> str:
    value = message.get("date")
    if not value:
        return ""
    try:
        return parsedate_to_datetime(str(value)).isoformat()
    except (TypeError, ValueError):
        return clean_inline(str(value))


def _decoded(part: EmailMessage) -> str:
    payload = part.get_payload(decode=True) or b""
    charset = part.get_content_charset()
    try:
        text, _ = decode_text(payload, charset)
    except ParseError:
        # A body in no recognisable encoding should not cost the message its attachments:
        # read it as declared, unreadable characters dropped.
        try:
            text = payload.decode(charset or "utf-8", errors="replace")
        except LookupError:
            text = payload.decode("utf-8", errors="replace")
    return text


def _shown_inline(part: EmailMessage) -> bool:
    return part.get_content_disposition() == "inline" and part.get("content-id") is not None


def _attachment(part: EmailMessage) -> Attachment:
    content_type = part.get_content_type()
    if content_type == "message/rfc822":
        # The forwarded message is the part's only child; as_bytes gives it back as a file.
        (forwarded,) = part.iter_parts()
        # Named after its subject, short and without path separators, so ".eml" survives.
        subject = clean_inline(str(forwarded.get("subject", ""))).translate(_SEPARATORS)[:100]
        name = part.get_filename() or f"{subject or 'forwarded message'}.eml"
        return Attachment(name, forwarded.as_bytes(policy=policy.default))
    name = part.get_filename() or "attachment" + (mimetypes.guess_extension(content_type) or ".bin")
    return Attachment(name, part.get_payload(decode=True) or b"")
