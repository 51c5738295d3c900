"""The API's JSON renderer (DRF's default renderer)."""

from __future__ import annotations

from rest_framework import renderers


class _AsciiJSONRenderer(renderers.JSONRenderer):
    ensure_ascii = True


class JSONRenderer(renderers.JSONRenderer):
    """DRF's JSON renderer (UTF-8, characters as they are), for any text an answer holds. An
    error message may quote the request's own text back ("... is not a valid choice."), and
    text holding an unpaired surrogate cannot be encoded as UTF-8: such an answer is rendered
    with every non-ASCII character escaped, which reads back as the same JSON."""

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            return _AsciiJSONRenderer().render(data, accepted_media_type, renderer_context)
