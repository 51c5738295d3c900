"""PostgreSQL backend that starts (or reuses) the embedded server before each new connection.

Settings select it when ``DATABASE_URL`` is unset. Resolving the socket at connection time,
rather than when settings load, means a process that never touches the database never starts
one, and a server restarted under a running web process is found again on its next connection.
"""

from django.conf import settings

from rag_project import embedded
from rag_project.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict:
        params = super().get_connection_params()
        endpoint = embedded.ensure_postgres(settings.RAG_DATA_DIR)
        params.update(host=endpoint.socket_dir, port=endpoint.port, user=endpoint.user)
        return params
