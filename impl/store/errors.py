"""What the session store raises: one base class, each subclass a kind of refusal."""

from __future__ import annotations

from unsee.model.errors import UnseeError


class StoreError(UnseeError):
    pass


class IntegrityError(StoreError):
    """A persisted row does not match its digest: the store was altered or damaged."""


class ConcurrentChange(StoreError):
    """Another writer changed the store since this process read it."""

