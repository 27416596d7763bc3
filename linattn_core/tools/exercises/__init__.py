"""Auto-checked exercises for the linattn book, one module per chapter.

Each chapter's exercises are attributes of its module; in a notebook::

    from linattn_core.tools import exercises

    def causal_cumsum_mine(q, k, v, phi):
        ...  # your code here

    exercises.causal.prefix_sums.check(causal_cumsum_mine)  # prints feedback; truthy if right
    exercises.causal.prefix_sums.hint(1)       # hint 1, 2, ... (more and more explicit)
    exercises.causal.prefix_sums.solution()    # prints a reference solution
    exercises.get("causal_cumsum_mine")        # the same exercise, by its name
    exercises.catalogue()                      # all exercises, by chapter

The exercises, by module (the attribute, then its name for ``get``: the function the reader
writes; ``Exercise.chapter`` is the chapter file that asks it)::

    softmax       exercises.softmax.stable_attention         softmax_attention_mine
                  exercises.softmax.score_matrix_bytes       score_matrix_bytes
    associative   exercises.associative.quadratic_form       kernel_attention_mine
                  exercises.associative.associative_form     associative_attention
                  exercises.associative.crossover            crossover_length
    feature_maps  exercises.feature_maps.elu_plus_one        elu_plus_one
                  exercises.feature_maps.performer_features  performer_features
    causal        exercises.causal.prefix_sums               causal_cumsum_mine
                  exercises.causal.streaming_step            streaming_step
                  exercises.causal.chunked_form              chunked_causal
    tradeoffs     exercises.tradeoffs.clamped_normalize      clamped_normalize
                  exercises.tradeoffs.kv_cache_bytes         kv_cache_bytes
                  exercises.tradeoffs.exact_capacity         exact_capacity
    beyond        exercises.beyond.decay_step                decay_step
                  exercises.beyond.delta_loop                delta_loop
                  exercises.beyond.normed_numerator          normed_numerator
    training      exercises.training.model_state_bytes       model_state_bytes

The capstone lab of the training chapter, an open exercise with a mechanical check
(``exercises.capstone.check_report``), is :mod:`.capstone`.

``check(fn)`` runs ``fn`` on several seeded float64 inputs (one token, an odd length such as 7, a
``d`` other than the examples', batch dimensions, and the edge cases each task states) and compares
the result with ``linattn_core`` itself, computed before ``fn`` runs. It never raises: it says
which input failed, the shape or the first mismatching position with its relative error, and, when
the answer matches a typical mistake, what that mistake is (:mod:`.checker` says how).

An answer must compute its result itself: one that calls the library's attention code (however it
was imported) fails, and the feedback names the function it called.

For graded work, ``exercises.summative(max_hints=1)`` switches ``solution()``,
``Exercise.solution_source()`` and the course tool's keys off, limits ``hint(n)``, and makes
``check()`` refuse the kit's own solutions too. It is locked for the session: ``formative()`` after
it does nothing (``scripts/make_assignments.py --summative`` writes notebooks that call it in a
locked cell, and again in every graded cell). ``check(fn, part=...)`` checks one group of inputs
(values, batch, edge, memory): partial credit, :mod:`.grading` says how many points each is worth.
The open exercises, graded by hand, are :data:`OPEN` with their rubrics.

No exercise, by its name or its attribute, is named like a function, class or module of the
library or a builtin (where the library has the function, the reader's is ``..._mine``), so a
reader's own version hides nothing they import, and ``from linattn_core.tools.exercises import *``
hides nothing; the chapter modules are not in ``__all__`` either.
"""

from __future__ import annotations

from . import associative, beyond, causal, feature_maps, softmax, tradeoffs, training
from . import capstone as capstone  # exercises.capstone: the training chapter's lab (open, with a check)
from . import grading as grading  # exercises.grading: the mode and the points
from .checker import CheckResult, Exercise, formative, summative
from .grading import is_summative
from .open import OPEN, OpenExercise

__all__ = ["EXERCISES", "OPEN", "CheckResult", "Exercise", "OpenExercise", "catalogue", "formative",
           "get", "is_summative", "summative"]

_CHAPTERS = (softmax, associative, feature_maps, causal, tradeoffs, beyond, training)  # book order

EXERCISES: dict[str, Exercise] = {
    ex.name: ex
    for chapter in _CHAPTERS
    for ex in (getattr(chapter, attr) for attr in chapter.__all__)
}


def get(name: str) -> Exercise:
    """The exercise called ``name`` (see :data:`EXERCISES`), e.g. ``get("causal_cumsum_mine")``."""
    try:
        return EXERCISES[name]
    except (KeyError, TypeError):
        raise KeyError(f"no exercise named {name!r}; the names are: "
                       f"{', '.join(EXERCISES)}") from None


def catalogue() -> None:
    """Print every exercise, grouped by the chapter file that asks it, with its difficulty and time."""
    chapters = dict.fromkeys(ex.chapter for ex in EXERCISES.values())  # book order
    for chapter in chapters:
        print(f"{chapter}.md")
        for ex in EXERCISES.values():
            if ex.chapter == chapter:
                stars = ("*" * ex.difficulty).ljust(3)
                print(f"  {ex.path:<42} {stars} ~{ex.minutes:>2} min  {ex.title}")
    print("Each has .check(fn), .hint(n) and .solution().")

