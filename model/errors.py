"""The typed errors unsee raises. Each message says what went wrong and what to do."""

from __future__ import annotations


class UnseeError(Exception):
    """Base of the typed errors the runtime raises; each message says what to do."""


class UnknownSource(UnseeError, KeyError):
    """A forget names a source that never entered the session, or was forgotten already."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])
