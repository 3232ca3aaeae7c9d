"""Persistence: `sqlite` (the session store), `episode` (episode files), `session` (open, forget
and check a stored session; `Agent`)."""
