"""Path converter for object ids: at most 18 digits, so every id fits a bigint and an absurd
one answers 404 instead of overflowing the database column."""

MAX_ID = 10**18 - 1


class IdConverter:
    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)
