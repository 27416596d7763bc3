"""The lm tier: the small language model of the training chapter, its attention layers, training and tasks.

It builds on the core (the attention forms and step states) and never imports the book's tools. What it
exports is its modules, one job each; importing this package imports none of them (most need torch), so
``from linattn_core.lm import stored`` reads the stored runs without loading torch:

- :mod:`~linattn_core.lm.layers`: one class per attention layer, by name in ``LAYERS``; :mod:`~.conv`
  the short causal convolution in front of some of them;
- :mod:`~linattn_core.lm.model`: the decoder-only model (``LanguageModel``, ``ModelConfig``);
- :mod:`~linattn_core.lm.train`: the one training loop (``fit``, ``train``), ``python -m linattn_core.train``;
- :mod:`~linattn_core.lm.mqar`: multi-query associative recall on that loop, ``python -m linattn_core.mqar``;
- :mod:`~linattn_core.lm.data`: the training text, fetched on first use and checked (``load_corpus``);
- :mod:`~linattn_core.lm.ngram`: count n-gram baselines, the floor a model must pass;
- :mod:`~linattn_core.lm.stored`: the stored runs (``lm/results/``, package data) and the rates their
  sweeps chose; :mod:`~linattn_core.lm.compare`: seeds, spreads and the tie rule they are read with.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["compare", "conv", "data", "layers", "model", "mqar", "ngram", "stored", "train"]


def __getattr__(name: str) -> Any:
    # ``linattn_core.lm.model`` after ``import linattn_core.lm``: each module is imported when first named
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
