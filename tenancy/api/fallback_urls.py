"""The last pattern under ``/api/v1/``: anything no app matched answers 404 in the API's error
shape. A pattern rather than ``handler404`` alone, because with DEBUG on Django answers an
unmatched path with its technical HTML page and never calls the handler. The root URLconf
includes this module last, by its dotted name."""

from django.urls import re_path
from django.views.decorators.csrf import csrf_exempt

from tenancy.api.errors import not_found

urlpatterns = [re_path(r"", csrf_exempt(not_found), name="api-fallback")]
