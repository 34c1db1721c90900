"""Limits that keep a hostile file from taking the machine down while it is read.

An office file (DOCX, PPTX, XLSX) is a zip: a few kilobytes can inflate to gigabytes (a
zip bomb). :func:`check_zip` reads every member once, streaming, and stops at the first
limit crossed, counting the bytes that really come out rather than the sizes the archive
claims, before any parser sees the file. PDF limits are checked page by page by the PDF
converter with the numbers below.
"""

from __future__ import annotations

import io
import zipfile
import zlib

from blockbatch.core.blocks import IngestError

#: The largest file read at all, in bytes.
MAX_FILE_BYTES = 200 * 1024 * 1024
#: An office file's members together, uncompressed.
MAX_UNZIPPED_BYTES = 256 * 1024 * 1024
#: Uncompressed / compressed size of one member: office XML compresses 5-20x; a bomb
#: compresses 1000x and more. Only checked past ``RATIO_FLOOR`` bytes, where it matters.
MAX_RATIO = 200
RATIO_FLOOR = 1024 * 1024
MAX_MEMBERS = 10_000
#: Pages of a PDF, and the largest page side in points (200 inches: PDF 1.7's own limit).
MAX_PAGES = 5_000
MAX_PAGE_SIDE = 14_400.0
#: Characters on one page: a real page holds a few thousand.
MAX_PAGE_CHARS = 200_000

_CHUNK = 1024 * 1024
#: An OLE compound file: what Office writes for a password-protected document.
_OLE = bytes.fromhex("d0cf11e0a1b11ae1")


def check_size(data: bytes | int, kind: str) -> None:
    """Refuse a file larger than :data:`MAX_FILE_BYTES` (its bytes, or its size in bytes)."""
    size = data if isinstance(data, int) else len(data)
    if size > MAX_FILE_BYTES:
        raise IngestError(
            f"the {kind} is {size / 2**20:.0f} MiB, above the {MAX_FILE_BYTES // 2**20} "
            "MiB blockbatch reads; split it into smaller files and upload each"
        )


def check_zip(data: bytes, kind: str) -> zipfile.ZipFile:
    """Open an office file's zip after checking it cannot inflate past the limits.

    Raises:
        IngestError: not a zip (corrupt or another format), too many members, a member
            that inflates past :data:`MAX_RATIO` or the whole past
            :data:`MAX_UNZIPPED_BYTES`, or a member that fails its CRC.
    """
    check_size(data, kind)
    if data.startswith(_OLE):
        raise IngestError(
            f"the {kind} is password-protected (encrypted), or is an old binary Office file "
            "saved under a new extension; remove the password (or save it as a current "
            f"{kind}) in its application and upload the new file"
        )
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        raise IngestError(
            f"the {kind} is corrupt or not a {kind} at all (it is not a readable zip "
            "archive); open it in its application, save it again and upload the new file"
        ) from None
    if len(members) > MAX_MEMBERS:
        raise IngestError(
            f"the {kind} holds {len(members)} parts, above the {MAX_MEMBERS} blockbatch "
            "reads; it is not an ordinary document. Save it again from its application"
        )
    total = 0
    for info in members:
        size = 0
        try:
            with archive.open(info) as member:
                while chunk := member.read(_CHUNK):
                    size += len(chunk)
                    total += len(chunk)
                    if total > MAX_UNZIPPED_BYTES:
                        raise IngestError(
                            f"the {kind} inflates to more than {MAX_UNZIPPED_BYTES // 2**20} "
                            "MiB when unzipped (a zip bomb, or a document with very large "
                            "embedded files); nothing was stored. Remove the embedded "
                            "media or split the document, then upload again"
                        )
                    if size > RATIO_FLOOR and size > MAX_RATIO * max(info.compress_size, 1):
                        raise IngestError(
                            f"the {kind}'s part {info.filename!r} inflates more than "
                            f"{MAX_RATIO} times its compressed size (a zip bomb); nothing "
                            "was stored. Save the document again from its application"
                        )
        except IngestError:
            raise
        except (zipfile.BadZipFile, zlib.error, OSError, ValueError, EOFError, NotImplementedError):
            raise IngestError(
                f"the {kind}'s part {info.filename!r} cannot be read (the file is corrupt "
                "or encrypted); open it in its application, save it again without a "
                "password and upload the new file"
            ) from None
    return archive
