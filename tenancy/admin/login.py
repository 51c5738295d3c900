"""The admin's sign-in, limited as API keys are (``tenancy.api.throttling``): every failed
sign-in counts against the caller's address with the failed API-key attempts, at
``RAG_AUTH_FAILURE_RATE``. Past the limit the form refuses any sign-in from that address, with
a right password as with a wrong one (so a guess cannot tell which was right), except for a
person who already signed in from that address within ``ADMITTED_FOR_S``; sessions already
open are not touched."""

from __future__ import annotations

from django.contrib.admin.forms import AdminAuthenticationForm
from django.core.exceptions import ValidationError

from tenancy.api.throttling import (
    TooManyFailedAuthentications,
    admit_user,
    count_failed_authentication,
)


class ThrottledAuthenticationForm(AdminAuthenticationForm):
    def clean(self):
        try:
            data = super().clean()
        except ValidationError:
            if self.cleaned_data.get("username") is not None:
                self._count_failure()
            raise
        try:
            admit_user(self.request, self.get_user())
        except TooManyFailedAuthentications as exc:
            self.user_cache = None
            raise self._throttled(exc) from None
        return data

    def _count_failure(self) -> None:
        try:
            count_failed_authentication(self.request)
        except TooManyFailedAuthentications as exc:
            raise self._throttled(exc) from None

    @staticmethod
    def _throttled(exc: TooManyFailedAuthentications) -> ValidationError:
        return ValidationError(
            "Too many failed sign-ins from this address; try again in %(seconds)d seconds.",
            code="throttled",
            params={"seconds": int((exc.wait or 1) + 0.999)},
        )
