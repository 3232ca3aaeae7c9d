"""What the session store raises: one base class, each subclass a kind of refusal."""

from __future__ import annotations

from unsee.model.errors import UnseeError


class StoreError(UnseeError):
    pass


class IntegrityError(StoreError):
    """A persisted row does not match its digest: the store was altered or damaged."""


class ConcurrentChange(StoreError):
    """Another writer changed the store since this process read it."""



class SealKeyError(StoreError):
    """A key file that cannot be used, or a store sealed under another key than the one given."""


class RolledBack(StoreError):
    """The store is an older state than its ledger's last: a restored backup or a rolled-back file.
    `unsee forget --db PATH --reapply` re-applies the forgets recorded since."""


class LedgerError(StoreError):
    """The ledger is missing, altered, or belongs to another store."""


class SideFileError(StoreError):
    """A -wal, -shm or -journal beside the store that does not belong to it."""
