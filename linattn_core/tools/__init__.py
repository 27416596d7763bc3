"""The tools tier: the book's figures, explorers, exercises, timing, course kit and benchmark.

They may use every tier below them (the core, the speed tier's kernel, the language model); nothing in
the library imports them. What this package exports is its modules; importing it imports none of them
(they need plotly, ipywidgets or torch), each is imported when first named:

- :mod:`~linattn_core.tools.viz`: plotly figures, one module of pure builders per chapter, and the
  static-site renderer (installed when the package is imported during the book build);
- :mod:`~linattn_core.tools.widgets`: the explorers, live ipywidgets in a kernel, static twins on the site;
- :mod:`~linattn_core.tools.timing`: timers, peak memory, the one cost model, sweeps and their plots;
- :mod:`~linattn_core.tools.bench`: ``python -m linattn_core.bench``, the benchmark;
- :mod:`~linattn_core.tools.exercises`: the auto-checked exercises (``check()``, ``hint(n)``, ``solution()``);
- :mod:`~linattn_core.tools.course`: answer keys, typical wrong answers, the exit-ticket quizzes
  (``quizzes/``, package data);
- :mod:`~linattn_core.tools.style`: the figures' house style (palette, template, axes, legends), which
  ``viz`` and ``timing`` both draw with.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["bench", "course", "exercises", "style", "timing", "viz", "widgets"]


def __getattr__(name: str) -> Any:
    # ``linattn_core.tools.viz`` after ``import linattn_core.tools``: each is imported when first named
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
