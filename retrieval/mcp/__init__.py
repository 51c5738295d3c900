"""The knowledge bases over the Model Context Protocol: ``server`` (the tools and how a call is
authorised, limited and answered), ``tools`` (what each tool does), ``schemas`` (their JSON
schemas), ``http`` (``/mcp``, streamable HTTP) and the ``mcp`` management command (stdio).
docs/agents.md is the manual."""
