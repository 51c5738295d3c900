"""Writes to the knowledge model. Views, commands and tasks call these; nothing else writes."""
