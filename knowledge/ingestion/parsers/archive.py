"""Reading ZIP archives: the guard every ZIP-based format passes before its library opens it
(.docx, .xlsx, .pptx, .epub), the reason given when an Office file is not a ZIP at all, and
the members of an uploaded .zip archive as uploads of their own (``archive_members``).

A small upload can unpack to gigabytes. The archive's directory is checked before anything is
read: the total unpacked size must stay within ParseLimits.max_unzipped_bytes and no member over
1 MB may be compressed more than 100:1 (real documents compress XML about 10:1; zip bombs
compress zeros about 1000:1). Python's zipfile never inflates a member beyond its declared size,
so the declared sizes are a real bound for the readers, which all unpack through zipfile.

A member is read whole before it is trusted (`read_member`): zipfile checks its CRC-32 only at
its end, and a damaged, truncated or oddly compressed member raises one of half a dozen
exception types, each turned into a ParseError saying what is wrong with it.

Office files that are not ZIPs are OLE2 (Compound File Binary) containers: either a password-
protected .docx/.xlsx/.pptx (Office encrypts the whole package into an "EncryptedPackage"
stream of a CFB container) or a legacy .doc/.xls/.ppt renamed. Either way the text cannot be
read, and the message says which of the two it is and what to do.

An uploaded archive passes the same guard; then each member is judged as the file it claims to
be. Entries that are not files to upload by design (folders, __MACOSX and hidden files, paths
with ``..`` or absolute, links) are never unpacked: they come back as skipped, with the reason
(``NotAnUpload``). Links and paths leading out count against ``max_archive_members`` as the
files they claim to be, so a crafted archive cannot add them without bound. A file too large,
an archive inside the archive and an encrypted member are refused from the directory entry
alone; every other member is read whole, its CRC-32 checked (``read_member``).
"""

from __future__ import annotations

import io
import lzma
import re
import stat
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from tenancy.errors import DomainError, ErrorKind

from .base import FileTooLarge, ParseError, ParseLimits, damaged

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# CFB directory entries hold their names in UTF-16LE.
ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_RATIO_CHECKED_FROM_BYTES = 1024 * 1024
_MAX_COMPRESSION_RATIO = 100
ARCHIVE_SUFFIX = ".zip"  # an upload with this suffix is unpacked into its members
# Skipped entries counted against max_archive_members as the files they claim to be.
_COUNTED = {"unsafe_path", "symlink"}
_DRIVE = re.compile(r"[A-Za-z]:")


def open_archive(data: bytes, limits: ParseLimits, what: str, extension: str) -> zipfile.ZipFile:
    """The checked archive of a `what` ("Excel workbook") whose files end in `extension`.

    Raises ParseError for encrypted and legacy Office files, damaged archives and zip bombs.
    """
    if data.startswith(OLE_MAGIC):
        raise ole_error(data, what, extension)
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise damaged(what, exc) from exc
    members = archive.infolist()
    unpacked = sum(m.file_size for m in members)
    if unpacked > limits.max_unzipped_bytes:
        raise ParseError(
            f"The {what} unpacks to {unpacked} bytes, more than the limit of "
            f"{limits.max_unzipped_bytes}; it was refused as a possible zip bomb"
        )
    for member in members:
        ratio = member.file_size / max(member.compress_size, 1)
        if member.file_size > _RATIO_CHECKED_FROM_BYTES and ratio > _MAX_COMPRESSION_RATIO:
            raise ParseError(
                f"The {what} has a part ({member.filename}) compressed {ratio:.0f}:1; "
                "it was refused as a possible zip bomb"
            )
    return archive


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """The bytes of one member, read to its end so its CRC-32 is checked.

    Raises ParseError (the member is damaged, truncated, encrypted or compressed with a method
    zipfile cannot inflate), worded for the person who made the archive.
    """
    try:
        return archive.read(info)
    except NotImplementedError as exc:  # Deflate64 (9), PPMd (98), strong encryption...
        raise ParseError(
            f"The file is compressed with a method that cannot be read (ZIP method "
            f"{info.compress_type}); create the archive again with the standard (Deflate) "
            f"compression"
        ) from exc
    except RuntimeError as exc:  # zipfile's "File ... is encrypted, password required"
        raise ParseError("The file is encrypted inside the archive; upload it unencrypted") from exc
    except EOFError as exc:
        raise ParseError(
            "The file ends before its declared size: the archive is truncated or damaged"
        ) from exc
    except (zipfile.BadZipFile, zlib.error, lzma.LZMAError, OSError, ValueError) as exc:
        # BadZipFile: a bad CRC-32 or file header; zlib, LZMA, OSError (bzip2): corrupt data
        raise damaged("file inside the archive", exc) from exc


def check_archive(data: bytes, limits: ParseLimits, what: str, extension: str) -> None:
    """`open_archive` for readers that open the bytes themselves."""
    open_archive(data, limits, what, extension).close()


def ole_error(data: bytes, what: str, extension: str) -> ParseError:
    if ENCRYPTED_PACKAGE in data:
        return ParseError(
            f"The {what} is encrypted (protected with a password); remove the password "
            f"(File > Info > Protect > Encrypt with Password, then an empty password), save it "
            f"and upload it again"
        )
    return ParseError(
        f"The file is a legacy Office file (97-2003 format), not a {extension} {what}; "
        f"open it in Office and save it as {extension}"
    )


# ------------------------------------------------------------------ an uploaded archive


class TooManyMembers(ParseError):
    code = "archive_too_large"
    kind = ErrorKind.TOO_LARGE


class NestedArchive(ParseError):
    code = "nested_archive"
    kind = ErrorKind.UNSUPPORTED


class EncryptedMember(ParseError):
    code = "encrypted_member"


class EmptyArchive(ParseError):
    code = "empty_archive"


class NotAnUpload(DomainError):
    """An archive entry that is not a file to upload by design (a folder, what archivers add,
    a path leading out of the archive, a link): listed as skipped, never a refusal."""

    code = "not_an_upload"
    kind = ErrorKind.INVALID


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIX)


@dataclass
class Member:
    """One entry of an archive, as an upload: a named binary stream with its size, or why it
    is not one: ``skipped`` (not an upload by design) or ``error`` (refused)."""

    name: str  # "archive.zip/folder/file.md", for the results
    path: str  # "folder/file.md"
    stream: io.BytesIO = field(default_factory=io.BytesIO)
    error: ParseError | None = None
    skipped: NotAnUpload | None = None

    @property
    def size(self) -> int:
        return self.stream.getbuffer().nbytes

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.stream.seek(offset, whence)


def _not_an_upload(info: zipfile.ZipInfo, path: str) -> NotAnUpload | None:
    """Why the entry is not a file to upload, or None. A path that leads out of the archive
    (``..``, absolute, a drive) or a link is never unpacked, whatever its name."""
    parts = PurePosixPath(path).parts
    if path.startswith("/") or _DRIVE.match(path) or ".." in parts:
        return NotAnUpload(
            "its path leads out of the archive (a .. segment, or absolute); it is not unpacked",
            code="unsafe_path",
        )
    if stat.S_ISLNK(info.external_attr >> 16):
        return NotAnUpload("a symbolic link, not a file; it is not followed", code="symlink")
    if info.is_dir() or path.endswith("/"):
        return NotAnUpload("a folder; the files in it are listed on their own", code="folder")
    if not parts or parts[0] == "__MACOSX":
        return NotAnUpload(
            "what macOS adds to an archive (__MACOSX), not a file of its own",
            code="archiver_metadata",
        )
    if any(part.startswith(".") for part in parts):
        return NotAnUpload("a hidden file (its name starts with a dot)", code="hidden_file")
    return None


def archive_members(archive_name: str, data: bytes, limits: ParseLimits) -> Iterator[Member]:
    """The entries of an uploaded ZIP archive, in archive order, each read whole (its CRC-32
    checked) unless it is skipped or refused. Raises ParseError for the whole archive
    (damaged, a zip bomb, empty, more than ``limits.max_archive_members`` files). An entry
    that is not a file to upload comes with ``skipped``; a file that cannot be an upload with
    ``error`` (larger than ``limits.max_file_bytes``, an archive itself, encrypted, damaged).
    Members are read as they are yielded: a caller that does not keep them holds one member's
    bytes at a time."""
    archive = open_archive(data, limits, "ZIP archive", ARCHIVE_SUFFIX)
    with archive:
        entries = []
        for info in archive.infolist():
            path = info.filename.replace("\\", "/")
            entries.append((info, path, _not_an_upload(info, path)))
        if not entries:
            raise EmptyArchive("The ZIP archive is empty: it holds no files")
        # Links and paths leading out count as the files they claim to be: a crafted archive
        # cannot add them without bound.
        files = sum(1 for _, _, why in entries if why is None or why.code in _COUNTED)
        if files > limits.max_archive_members:
            raise TooManyMembers(
                f"The archive holds {files:,} files, more than the limit of "
                f"{limits.max_archive_members:,}; split it into several archives"
            )
        for info, path, why in entries:
            member = Member(f"{archive_name}/{path}", path, skipped=why)
            if why is None:
                member.error = _refusal(info, path, limits)
            if why is None and member.error is None:
                try:
                    member.stream = io.BytesIO(read_member(archive, info))
                except ParseError as exc:
                    member.error = exc
            yield member


def _refusal(info: zipfile.ZipInfo, path: str, limits: ParseLimits) -> ParseError | None:
    """Why a file of the archive cannot be an upload, judged from its directory entry."""
    if info.file_size > limits.max_file_bytes:
        return FileTooLarge(f"the file is larger than the limit of {limits.max_file_bytes:,} bytes")
    if is_archive(path):
        return NestedArchive("archives inside an archive are not unpacked; upload it on its own")
    if info.flag_bits & 0x1:
        return EncryptedMember("the file is encrypted inside the archive; upload it unencrypted")
    return None
