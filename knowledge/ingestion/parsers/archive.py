"""The guard every ZIP-based format passes before its library opens it (.docx, .xlsx, .pptx,
.epub), and the reason given when an Office file is not a ZIP at all.

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
"""

from __future__ import annotations

import io
import lzma
import zipfile
import zlib

from .base import ParseError, ParseLimits, damaged

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# CFB directory entries hold their names in UTF-16LE.
ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_RATIO_CHECKED_FROM_BYTES = 1024 * 1024
_MAX_COMPRESSION_RATIO = 100


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
