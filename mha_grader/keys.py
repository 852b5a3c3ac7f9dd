"""Grading inputs no one can predict: a secret run key and the student's id seed each item's cases.

Class grading (``mha-course grade``) keeps a secret **run key** (32 random bytes, hex, in a file only
the instructor can read). Each student's inputs for an item come from

    HMAC-SHA256(key, "mha-grader/inputs/v1" | student | item id | submission id)

as the seed of a NumPy ``Generator``. So no two students (and no two Gradescope submissions) share
inputs, a leaked answer helps nobody else, and the same key, student and submission id reproduce the
same inputs (regrading is identical). The key stays in the grading (parent) process: only the cases
it derives are sent to a sandbox, never the key, the digest or the key file's path.

Self-checks (``check("exNN")``, ``mha-course check``) use a fixed **public** seed instead
(``PublicSeed``); their inputs differ from anyone's grading inputs.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

KEY_BYTES = 32
_DOMAIN = b"mha-grader/inputs/v1"
PUBLIC_NOTE = "public self-check inputs; your grade is computed on different, secret inputs"


class KeyFileError(ValueError):
    """The key file is missing, malformed, or readable by others."""


@dataclass(frozen=True)
class PublicSeed:
    """Self-check inputs: a public seed and the item id (what ``Item.cases(int)`` always did)."""

    seed: int

    def rng(self, item_id: str) -> np.random.Generator:
        return np.random.default_rng([int(self.seed) % (2**32), zlib.crc32(item_id.encode())])

    def describe(self) -> str:
        return f"seed {self.seed}: {PUBLIC_NOTE}"


@dataclass(frozen=True)
class StudentInputs:
    """Grading inputs of one student (and one submission) under a secret run key."""

    key: bytes = field(repr=False)
    student: str
    submission: str = ""

    def __post_init__(self) -> None:
        if len(self.key) < 16:
            raise KeyFileError(f"key: expected at least 16 bytes, got {len(self.key)}")

    def digest(self, item_id: str) -> bytes:
        """The 32-byte HMAC that seeds ``item_id``'s cases (stays in the parent)."""
        parts = (_DOMAIN, self.student.encode(), item_id.encode(), self.submission.encode())
        msg = b"".join(len(p).to_bytes(4, "big") + p for p in parts)  # length-prefixed: unambiguous
        return hmac.new(self.key, msg, hashlib.sha256).digest()

    def rng(self, item_id: str) -> np.random.Generator:
        return np.random.default_rng(int.from_bytes(self.digest(item_id), "big"))

    def describe(self) -> str:
        return "secret per-student inputs"


def fingerprint(key: bytes) -> str:
    """A short public name for a key (recorded in grading.json; reveals nothing about the key)."""
    return hmac.new(key, b"mha-grader/fingerprint/v1", hashlib.sha256).hexdigest()[:16]


def new_key_file(path: Path) -> bytes:
    """Create ``path`` with a fresh random key, readable by its owner only (0600); never overwrite."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(KEY_BYTES)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(key.hex() + "\n")
    return key


def read_key_file(path: Path) -> bytes:
    """The key in ``path``; refuses a symlink, a non-file, a group/world-readable file, bad hex."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise KeyFileError(f"key file: cannot open {path}: {e.strerror}") from None
    with os.fdopen(fd, "r", encoding="ascii", errors="replace") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise KeyFileError(f"key file: {path} is not a regular file")
        if os.name == "posix" and st.st_mode & 0o077:
            raise KeyFileError(
                f"key file: {path} is readable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                f"run: chmod 600 {path}"
            )
        text = f.read(1000).strip()
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise KeyFileError(f"key file: {path} does not hold a hex key") from None
    if len(key) < 16:
        raise KeyFileError(f"key file: {path}: expected at least 16 bytes of key, got {len(key)}")
    return key


def load_or_create(path: Path) -> tuple[bytes, bool]:
    """``(key, created)``: read ``path`` if it exists, else create it with a fresh key."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        return read_key_file(path), False
    return new_key_file(path), True


def default_key_path(out: Path) -> Path:
    """Where ``mha-course grade --out OUT`` keeps its key when not given ``--key-file``:
    ``OUT.key`` NEXT TO the output folder (so handing out OUT/<student>/ never hands out the key)."""
    out = Path(out).absolute()
    return out.with_name(out.name + ".key")
