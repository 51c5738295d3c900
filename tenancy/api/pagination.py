"""Every list is paginated with ``limit`` and ``offset`` over a stable order (each list orders by
unique keys: ids, or document and position for chunks), so pages never repeat or skip a row
that did not change."""

from rest_framework.pagination import LimitOffsetPagination


class Pagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500
    max_offset = 10**12

    def get_offset(self, request) -> int:
        return min(super().get_offset(request), self.max_offset)
