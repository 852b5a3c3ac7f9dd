"""Chapter 13: the corpus — Python standard-library source that every learner already has.

Nothing is downloaded and no third-party text is committed: the text is read from the
running interpreter's own ``Lib/`` folder (``sysconfig.get_paths()["stdlib"]``). The file
list below is fixed: 67 pure-Python modules whose source is **byte-identical in CPython
3.10.13, 3.11.7, 3.12.1 and 3.13.0** (checked when the list was made), so every learner on
3.10–3.13 gets the same 430,750 characters (392,746 train, 38,004 validation) and the same SHA-256. Packages that some Linux
distributions ship separately (idlelib, tkinter, turtledemo, ensurepip) and the generated
codec tables (encodings/) are left out.

The split is by file, fixed: every tenth file (index 4, 14, 24, ...) is validation, the rest
training, so validation is whole modules the model never saw (not the tail of one file).
"""

from __future__ import annotations

import hashlib
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path

STDLIB_FILES: tuple[str, ...] = (
    "_compression.py",
    "_markupbase.py",
    "_py_abc.py",
    "_sitebuiltins.py",
    "_threading_local.py",
    "antigravity.py",
    "asyncio/log.py",
    "asyncio/protocols.py",
    "asyncio/threads.py",
    "asyncio/windows_utils.py",
    "concurrent/__init__.py",
    "contextvars.py",
    "ctypes/macholib/__init__.py",
    "curses/__init__.py",
    "curses/has_key.py",
    "curses/panel.py",
    "dbm/gnu.py",
    "dbm/ndbm.py",
    "difflib.py",
    "email/_encoded_words.py",
    "email/mime/__init__.py",
    "email/mime/application.py",
    "html/__init__.py",
    "importlib/metadata/_collections.py",
    "importlib/metadata/_functools.py",
    "json/__init__.py",
    "json/scanner.py",
    "multiprocessing/__init__.py",
    "multiprocessing/dummy/__init__.py",
    "multiprocessing/dummy/connection.py",
    "multiprocessing/heap.py",
    "multiprocessing/popen_forkserver.py",
    "multiprocessing/popen_spawn_posix.py",
    "multiprocessing/reduction.py",
    "multiprocessing/sharedctypes.py",
    "nturl2path.py",
    "optparse.py",
    "py_compile.py",
    "pyclbr.py",
    "stringprep.py",
    "struct.py",
    "this.py",
    "tracemalloc.py",
    "unittest/__main__.py",
    "unittest/_log.py",
    "unittest/signals.py",
    "unittest/suite.py",
    "unittest/util.py",
    "urllib/__init__.py",
    "urllib/error.py",
    "urllib/response.py",
    "urllib/robotparser.py",
    "wsgiref/headers.py",
    "xml/__init__.py",
    "xml/dom/NodeFilter.py",
    "xml/dom/__init__.py",
    "xml/dom/domreg.py",
    "xml/dom/minicompat.py",
    "xml/dom/xmlbuilder.py",
    "xml/etree/__init__.py",
    "xml/etree/cElementTree.py",
    "xml/parsers/__init__.py",
    "xml/parsers/expat.py",
    "xml/sax/handler.py",
    "xml/sax/saxutils.py",
    "xmlrpc/__init__.py",
    "zoneinfo/__init__.py",
)

#: SHA-256 of the concatenated text (train + val) on CPython 3.10–3.13.
REFERENCE_SHA256 = "cd70f1c9975b434cc805798c02fd7013ee64244f006de5a36b86f3035ae5476e"

SEPARATOR = "\n\n"  # between files (our only addition to the text)
VAL_EVERY = 10  # file i is validation when i % VAL_EVERY == VAL_OFFSET
VAL_OFFSET = 4


class CorpusMismatchWarning(UserWarning):
    """The learner's corpus differs from the one a checkpoint was trained on."""


@dataclass(frozen=True)
class Corpus:
    """The text, split by file, and its checksum.

    ``train`` and ``val`` are strings; ``missing`` lists files this interpreter lacks.
    """

    train: str
    val: str
    sha256: str
    root: str
    missing: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """Train then validation text (what the checksum covers)."""
        return self.train + self.val


def stdlib_root() -> Path:
    """The running interpreter's standard-library folder (``Lib/``)."""
    return Path(sysconfig.get_paths()["stdlib"])


def read_source(path: Path) -> str:
    """One file's text, UTF-8, with Windows line endings normalised to ``\\n``."""
    return path.read_bytes().decode("utf-8").replace("\r\n", "\n")


def load_corpus(root: str | Path | None = None, files: tuple[str, ...] = STDLIB_FILES) -> Corpus:
    """Read ``files`` from ``root`` (default: this Python's stdlib), in the fixed order.

    Missing files are skipped with a warning (the checksum then differs and the
    numbers will too).
    """
    root = stdlib_root() if root is None else Path(root)
    train, val, missing = [], [], []
    for i, name in enumerate(files):
        path = root / name
        if not path.is_file():
            missing.append(name)
            continue
        (val if i % VAL_EVERY == VAL_OFFSET else train).append(read_source(path))
    if missing:
        warnings.warn(
            f"corpus: {len(missing)} of {len(files)} standard-library files are missing "
            f"from {root} (first: {missing[0]}); training and evaluation still work, "
            "but the numbers will differ from the course's",
            CorpusMismatchWarning,
            stacklevel=2,
        )
    train_text, val_text = SEPARATOR.join(train), SEPARATOR.join(val)
    sha = hashlib.sha256((train_text + val_text).encode("utf-8")).hexdigest()
    return Corpus(train_text, val_text, sha, str(root), tuple(missing))


def check_corpus(corpus: Corpus, expected_sha256: str, what: str = "this checkpoint") -> bool:
    """Compare checksums; on a mismatch warn (clearly) and return False — still usable."""
    if corpus.sha256 == expected_sha256:
        return True
    warnings.warn(
        f"corpus: your standard-library text (SHA-256 {corpus.sha256[:12]}...) differs from the "
        f"one {what} was trained on ({expected_sha256[:12]}...). This happens with a Python "
        "outside 3.10-3.13 or a patched/partial standard library. Everything still runs, but "
        "losses and samples will differ from the course's printed numbers.",
        CorpusMismatchWarning,
        stacklevel=2,
    )
    return False
