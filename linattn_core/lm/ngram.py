"""Count n-gram models: the floor a character model must pass before attention is credited with anything.

A character-level transformer sees the current character in its residual stream, so predicting the
next one from the current one alone (a **bigram**) needs no attention at all. Longer contexts need
the model to read earlier positions: an attention layer, or a convolution. Count tables give the
floor at each context length without any learning::

    P(c | ctx) = (count(ctx, c) + alpha) / (count(ctx) + alpha * V)        add-alpha smoothing

with ``ctx`` the ``n - 1`` characters before ``c``. ``alpha`` is chosen on the training split (counts
of its first 90%, scored on its last 10%); the table is then counted on the whole training split and
scored on the validation split, in nats per character, the unit of the training loss::

    from linattn_core.lm import data, ngram

    corpus = data.load_corpus()
    ngram.baselines(corpus)            # {1: ..., 2: ..., 3: ..., 4: ...}  nats per character

The first ``n - 1`` characters of the validation split have no full context and are not scored (3 of
its 505,728 for the 4-gram).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["ALPHAS", "NGram", "baselines", "fit", "score"]

#: The smoothing constants tried on the training split's held-out tenth.
ALPHAS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
HOLDOUT = 0.1  # the tenth of the training split that picks alpha


def _codes(tokens: np.ndarray, n: int, vocab: int) -> np.ndarray:
    """Each window of ``n`` tokens as one integer in base ``vocab``: tokens (L,) -> codes (L - n + 1,)."""
    t = np.asarray(tokens, dtype=np.int64)
    codes = np.zeros(len(t) - n + 1, dtype=np.int64)
    for i in range(n):
        codes = codes * vocab + t[i : len(t) - n + 1 + i]
    return codes


def _lookup(table: tuple[np.ndarray, np.ndarray], codes: np.ndarray) -> np.ndarray:
    """Counts of ``codes`` in a sorted ``(keys, counts)`` table (0 where absent)."""
    keys, counts = table
    where = np.minimum(np.searchsorted(keys, codes), len(keys) - 1)
    return np.where(keys[where] == codes, counts[where], 0)


@dataclass(frozen=True)
class NGram:
    """A counted n-gram table: the windows of ``n`` and of ``n - 1`` tokens, each as sorted (keys, counts)."""

    n: int
    vocab: int
    alpha: float
    grams: tuple[np.ndarray, np.ndarray]
    contexts: tuple[np.ndarray, np.ndarray]


def fit(tokens: np.ndarray, n: int, vocab: int, alpha: float) -> NGram:
    """Count the ``n``-grams of ``tokens`` (ints in ``[0, vocab)``) for add-``alpha`` smoothing."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1 or vocab ** n >= 2**62:
        raise ValueError(f"vocab must be a positive int with vocab**n < 2**62, got {vocab!r} (n = {n})")
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0 (add-alpha smoothing), got {alpha!r}")
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or len(tokens) < n:
        raise ValueError(f"tokens must be 1-D with at least n = {n} of them, got shape {tokens.shape}")
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise ValueError(f"tokens must lie in [0, {vocab}), got {tokens.min()}..{tokens.max()}")
    grams = np.unique(_codes(tokens, n, vocab), return_counts=True)
    # a context's count is the number of n-grams that start with it (the last n - 1 tokens end none)
    contexts = np.unique(grams[0] // vocab, return_counts=False)
    totals = np.bincount(np.searchsorted(contexts, grams[0] // vocab), weights=grams[1]).astype(np.int64)
    return NGram(n, vocab, float(alpha), grams, (contexts, totals))


def score(model: NGram, tokens: np.ndarray) -> float:
    """Mean negative log-likelihood of ``tokens[n-1:]`` given their ``n - 1`` predecessors, nats per token."""
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or len(tokens) < model.n:
        raise ValueError(f"tokens must be 1-D with at least n = {model.n} of them, got shape {tokens.shape}")
    if tokens.min() < 0 or tokens.max() >= model.vocab:
        raise ValueError(f"tokens must lie in [0, {model.vocab}), got {tokens.min()}..{tokens.max()}")
    codes = _codes(tokens, model.n, model.vocab)
    joint = _lookup(model.grams, codes)
    context = _lookup(model.contexts, codes // model.vocab) if model.n > 1 else \
        np.full(len(codes), model.grams[1].sum())
    p = (joint + model.alpha) / (context + model.alpha * model.vocab)
    return float(-np.log(p).mean())


def _choose_alpha(train: np.ndarray, n: int, vocab: int, alphas: Sequence[float]) -> float:
    cut = round(len(train) * (1 - HOLDOUT))
    return min(alphas, key=lambda a: score(fit(train[:cut], n, vocab, a), train[cut - n + 1 :]))


def baselines(corpus, orders: Sequence[int] = (1, 2, 3, 4),
              alphas: Sequence[float] = ALPHAS) -> dict[int, float]:
    """Validation loss (nats per character) of the add-alpha n-gram of each order in ``orders``, counted
    on ``corpus.train`` with alpha chosen on its held-out tenth, scored on ``corpus.val``."""
    out = {}
    for n in orders:
        alpha = _choose_alpha(corpus.train, n, corpus.vocab_size, alphas)
        out[n] = score(fit(corpus.train, n, corpus.vocab_size, alpha), corpus.val)
    return out
