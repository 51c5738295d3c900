from django.urls import re_path

from retrieval.mcp.http import mcp_endpoint

# With or without a trailing slash, as the REST API answers (host configurations vary).
urlpatterns = [re_path(r"^mcp/?$", mcp_endpoint, name="mcp")]
