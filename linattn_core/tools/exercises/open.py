"""The open exercises: no ``check()``, graded by hand against a short rubric.

Some exercises of the book are predictions, measurements and derivations whose answer is an
explanation with the learner's own numbers; no function can check them. Each has a rubric here:
what earns each point. ``scripts/make_assignments.py`` puts the statement (read from the chapter),
the rubric and a manually graded answer cell into the chapter's assignment; the instructors page
shows the same rubrics (a test holds the two to each other).

What a full answer says (the model answer, for the grader) is not here: it lives in the teacher's
file ``teacher/model_answers.json`` of the repository, which neither the installed package nor a
released notebook carries; :func:`linattn_core.tools.course.model_answer` reads it when it is there.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OPEN", "OpenExercise"]


@dataclass(frozen=True)
class OpenExercise:
    """An exercise graded by hand.

    Parameters
    ----------
    label : str
        The ``:label:`` of its ``{exercise}`` block in the chapter (the statement is read from there).
    chapter : str
        The chapter file, without ``.md``.
    title : str
        The exercise's title in the chapter.
    difficulty, minutes : int
        As for the auto-checked exercises: 1 to 3 stars, about how long it takes.
    rubric : tuple of (int, str)
        Points and what earns them; the points add up to the exercise's.
    """

    label: str
    chapter: str
    title: str
    difficulty: int
    minutes: int
    rubric: tuple[tuple[int, str], ...]

    @property
    def points(self) -> int:
        return sum(p for p, _ in self.rubric)

    def rubric_markdown(self) -> str:
        """The rubric as a markdown list, one line per criterion."""
        return "\n".join(f"- **{p} point{'s' if p > 1 else ''}**: {text}" for p, text in self.rubric)


_EXERCISES = [
    OpenExercise(
        label="ex-softmax-split", chapter="softmax", title="Where does the time go?",
        difficulty=2, minutes=20,
        rubric=(
            (1, "times the two products and the softmax separately, each on its own inputs, warmed "
                "up and repeated (best or median of several calls), at N = 2048 in float32 for "
                "d = d_v = 64 and for d = d_v = 8"),
            (1, "says which part dominates at each width, from their own numbers (machines differ: "
                "the reading is graded, not the outcome)"),
            (1, "explains the change with a count per score: the products cost about 2d and 2d_v "
                "FLOPs per score, the softmax a few operations and several passes over the "
                "N x N array whatever d is, which 2N^2(d + d_v) leaves out"),
        ),
    ),
    OpenExercise(
        label="ex-timing-wider", chapter="timing", title="Predict, then measure, a wider head",
        difficulty=2, minutes=25,
        rubric=(
            (1, "writes a prediction down before measuring, from the fitted model at "
                "d = d_v = d_phi = 128"),
            (1, "sweeps softmax_naive and linear at d = d_v = 128 around the prediction and reports "
                "the measured crossover (or that there is none within the lengths swept)"),
            (1, "states the direction the FLOP model gives (the crossover grows with the width: "
                "N* = 2 d_phi d_v / (d + d_v), which is d when all widths are equal) and whether "
                "the measurement moved that way"),
            (1, "judges the model calibrated at d = 64: how far its prediction is from the "
                "measurement, with one reason (wider products run at another efficiency; the "
                "machine's load)"),
        ),
    ),
    OpenExercise(
        label="ex-timing-chunk", chapter="timing", title="The chunk size",
        difficulty=2, minutes=20,
        rubric=(
            (1, "times the causal chunked form at one length for C = 16, 32, 64, 128 and 256, "
                "repeated, and names the fastest C"),
            (1, "says what grows with C: the masked C x C blocks, 2NC(d_phi + d_v) FLOPs, half of "
                "them on masked zeros"),
            (1, "says what shrinks with C, the number of chunks N/C and every cost paid once per "
                "chunk, and explains their curve by the balance of the two (a minimum in between, "
                "or the smallest C where a chunk boundary costs little)"),
        ),
    ),
    OpenExercise(
        label="ex-beyond-window", chapter="beyond_decay", title="Effective window of a decay",
        difficulty=2, minutes=20,
        rubric=(
            (1, "writes the normalised weight of age a as gamma^a / sum_b gamma^b and the mean age "
                "as a ratio of two series"),
            (1, "sums them (sum_a gamma^a = 1 / (1 - gamma), sum_a a gamma^a = gamma / (1 - gamma)^2, "
                "e.g. by differentiating the geometric series) and gets gamma / (1 - gamma)"),
            (1, "checks it numerically with decayed_kernel_attention, all-equal features and a long "
                "sequence, reading the last query's weights, to a stated tolerance"),
        ),
    ),
    OpenExercise(
        label="ex-beyond-lms", chapter="beyond_delta", title="The delta rule as gradient descent",
        difficulty=3, minutes=25,
        rubric=(
            (1, "computes the gradient of 1/2 |S^T phi(k) - v|^2 with respect to S: "
                "phi(k) (S^T phi(k) - v)^T, with the shapes right"),
            (1, "shows that a step of size beta_t is the delta update "
                "S + beta_t phi(k_t) (v_t - S^T phi(k_t))^T"),
            (1, "replays n < d pairs many times and compares the state's answers on the stored keys "
                "with the least-squares state's (agreement to rounding)"),
            (1, "says why n < d matters: an exact solution exists, and repeated steps converge to "
                "one that returns every stored value"),
        ),
    ),
    OpenExercise(
        label="ex-beyond-ssd", chapter="beyond_tour", title="State-space duality, checked",
        difficulty=2, minutes=20,
        rubric=(
            (1, "builds the mask from cumulative log-gates, b_i = sum_{l <= i} log g_l and "
                "L_ij = exp(b_i - b_j) on and below the diagonal, 0 above, so that no product of "
                "gates underflows"),
            (1, "computes (tril(phi(Q) phi(K)^T) * L) V for elu+1 features and shows that it agrees "
                "with the recurrence to rounding, with the largest difference stated"),
            (1, "names the masked product the quadratic (attention) form, the loop the recurrent "
                "(state-space) form, and the chunked form, masked blocks inside each chunk and the "
                "decayed state across chunks, the one in between"),
        ),
    ),
]

OPEN: dict[str, OpenExercise] = {ex.label: ex for ex in _EXERCISES}
"""Every open exercise, by its label in the chapter, in book order."""
