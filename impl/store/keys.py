"""The seal of a store: an HMAC-SHA256 under a key the operator keeps, or, without a key, a plain
SHA-256 checksum (see docs/trust.md for what each defends against).

A key file holds at least 32 random bytes (as written by `unsee key new PATH`: 64 hex digits);
its id, an HMAC of a fixed label under it, names the key in the store and the ledger without
revealing it. `--key-file PATH` on every store command, `UNSEE_KEY_FILE` in the environment, or
`key=` in the Python API (a path or a `SealKey`) choose it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from unsee.impl.store.errors import SealKeyError

KEY_BYTES = 32
CHECKSUM = "sha256"  # the seal without a key: detects accidents, not a forger


@dataclass(frozen=True)
class SealKey:
    secret: bytes = b""  # empty: no key (a checksum)

    @property
    def keyed(self) -> bool:
        return bool(self.secret)

    @property
    def id(self) -> str:
        """What the store and the ledger record: `hmac-sha256:<16 hex>` (the key's id), or `sha256`."""
        if not self.keyed:
            return CHECKSUM
        return "hmac-sha256:" + hmac.new(self.secret, b"unsee seal key id", hashlib.sha256).hexdigest()[:16]

    def hasher(self):
        """A fresh digest object of the seal: HMAC-SHA256 under the key, or SHA-256."""
        return hmac.new(self.secret, digestmod=hashlib.sha256) if self.keyed else hashlib.sha256()

    def digest(self, *parts: bytes) -> str:
        h = self.hasher()
        for p in parts:
            h.update(p)
        return h.hexdigest()


NO_KEY = SealKey()


def read_key(path) -> SealKey:
    """The key in the file at `path` (hex digits, or raw bytes), refused with what to do if it is
    missing, unreadable or shorter than 32 bytes."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except IsADirectoryError:
        raise SealKeyError(f"key file {p} is a directory; give the file `unsee key new` wrote") from None
    except OSError as e:
        raise SealKeyError(f"cannot read key file {p} ({e.strerror}); make one with `unsee key new {p}`") from None
    text = raw.strip()
    try:
        secret = bytes.fromhex(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        secret = raw
    if len(secret) < KEY_BYTES:
        raise SealKeyError(f"key file {p} holds {len(secret)} bytes; a key is at least {KEY_BYTES} random bytes "
                        f"(`unsee key new {p}` writes one)")
    return SealKey(secret)


def new_key(path) -> SealKey:
    """Write a new random key to `path` (refusing to overwrite a file), readable by its owner only."""
    p = Path(path)
    secret = secrets.token_bytes(KEY_BYTES)
    try:
        fd = os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        raise SealKeyError(f"{p} already exists; a key file is never overwritten (pick a new path)") from None
    except OSError as e:
        raise SealKeyError(f"cannot create key file {p} ({e.strerror})") from None
    with os.fdopen(fd, "w") as f:
        f.write(secret.hex() + "\n")
    return SealKey(secret)


def key_of(given=None) -> SealKey:
    """The seal key to use: `given` (a SealKey, or a key file's path), else the file `UNSEE_KEY_FILE`
    names, else none (a checksum)."""
    if isinstance(given, SealKey):
        return given
    path = given if given is not None else os.environ.get("UNSEE_KEY_FILE") or None
    return NO_KEY if path is None else read_key(path)
