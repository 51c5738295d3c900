"""Settings profiles: ``development`` (default), ``production`` and ``test``; see ``base``."""
