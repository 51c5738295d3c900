"""Uploaded files stream to temporary files on disk, never into memory, and never beyond the
size limit: past ``RAG_MAX_UPLOAD_BYTES`` the rest of a file is counted but not written."""

from __future__ import annotations

from django.conf import settings
from django.core.files.uploadhandler import TemporaryFileUploadHandler


class BoundedTemporaryFileUploadHandler(TemporaryFileUploadHandler):
    """TemporaryFileUploadHandler that keeps at most ``RAG_MAX_UPLOAD_BYTES + 1`` bytes of each
    file. The uploaded file's ``size`` is the size that was sent, so a file over the limit is
    recognised (and refused with 413) while the disk holds only one byte more than allowed."""

    def new_file(self, *args, **kwargs) -> None:
        super().new_file(*args, **kwargs)
        self.written = 0

    def receive_data_chunk(self, raw_data: bytes, start: int) -> None:
        room = settings.RAG_MAX_UPLOAD_BYTES + 1 - self.written
        if room > 0:
            kept = raw_data[:room]
            self.file.write(kept)
            self.written += len(kept)
        return None
