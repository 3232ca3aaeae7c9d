"""Persistence: `sqlite` (the session store, `Store`), with its layout (`encoding`), digests
(`digests`), one-writer lock and write points (`locking`) and errors
(`errors`); `episode` (episode files); `session` (open, forget and check a stored session;
`Agent`); `show` (a stored session as a person reads it)."""
