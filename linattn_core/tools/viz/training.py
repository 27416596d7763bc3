"""Figures of the training chapter: learning-rate sweeps, seeds with their spread, contrasts, recall.

Pure builders: each takes the stored runs (the JSON dicts of ``python -m linattn_core.train`` and
``python -m linattn_core.mqar``) and returns a ``plotly.graph_objects.Figure``. A layer keeps one
colour in every figure; the two layers of a contrast share it, the variant dotted (``retnet`` solid,
``retnet_no_decay`` dotted; ``deltanet`` solid, ``deltanet_additive`` dotted; ``softmax`` solid,
``softmax-conv4``, softmax with a short convolution, dotted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..style import PALETTE, finish, legend_below, log_axis

__all__ = ["LAYER_STYLE", "contrast_figure", "lr_sweep_figure", "recall_capacity_figure",
           "recall_curves_figure", "recall_heads_figure", "recall_state_figure", "seed_curves_figure",
           "style_of"]

# colour-blind-safe (Okabe-Ito and its darker companions), one per layer; a contrast's pair shares it
LAYER_STYLE: dict[str, tuple[str, str]] = {
    "softmax": ("#000000", "solid"),
    "softmax-conv4": ("#000000", "dot"),  # softmax with DeltaNet's short convolution
    "elu+1": ("#0072B2", "solid"),
    "relu": ("#56B4E9", "solid"),
    "performer": ("#CC79A7", "solid"),
    "retnet": ("#D55E00", "solid"),
    "retnet_no_decay": ("#D55E00", "dot"),
    "simple_gla": ("#E69F00", "solid"),
    "simple_gla_const": ("#E69F00", "dot"),  # its control: the gate without its input
    "gla": ("#A06A00", "solid"),
    "deltanet": ("#009E73", "solid"),
    "deltanet_additive": ("#009E73", "dot"),
}


def style_of(kind: str) -> tuple[str, str]:
    """``(colour, dash)`` of a layer (grey for a name the table does not know)."""
    return LAYER_STYLE.get(kind, ("#666666", "dash"))


def _rgba(colour: str, alpha: float) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def lr_sweep_figure(sweeps: Mapping[str, Mapping[str, Mapping]], chosen: Mapping[str, str], *,
                    key: str = "final_val_loss", y_title: str = "validation loss after the sweep (nats/char)",
                    title: str | None = None) -> go.Figure:
    """Final ``key`` against the learning rate, one line per layer, the chosen rate ringed.

    ``sweeps``: ``{kind: {rate as written: run}}`` (:func:`linattn_core.lm.stored.epoch_sweep`);
    ``chosen``: ``{kind: rate as written}``.
    """
    fig = go.Figure()
    for kind, runs in sweeps.items():
        colour, dash = style_of(kind)
        rates = sorted(runs, key=float)
        x, y = [float(r) for r in rates], [runs[r][key] for r in rates]
        fig.add_trace(go.Scatter(x=x, y=y, name=kind, legendgroup=kind, mode="lines+markers",
                                 line={"color": colour, "dash": dash},
                                 hovertemplate=f"{kind}<br>lr %{{x:g}}<br>%{{y:.4f}}<extra></extra>"))
        if kind in chosen:
            fig.add_trace(go.Scatter(x=[float(chosen[kind])], y=[runs[chosen[kind]][key]], legendgroup=kind,
                                     mode="markers", showlegend=False, hoverinfo="skip",
                                     marker={"size": 15, "color": "rgba(0,0,0,0)",
                                             "line": {"color": colour, "width": 2}}))
    fig.update_xaxes(title="peak learning rate (log scale)", **log_axis())
    fig.update_yaxes(title=y_title)
    finish(fig, title=title, alt="A line per layer: the final value of its short run at each learning rate; "
           "a ring marks the rate chosen for the longer runs.", height=440)
    return legend_below(fig)


def seed_curves_figure(runs: Mapping[str, Sequence[Mapping]], *, tokens_per_step: int,
                       baselines: Mapping[str, float] | None = None, x: str = "characters",
                       step_s: Mapping[str, float] | None = None, title: str | None = None) -> go.Figure:
    """Validation loss against the characters seen (``x="characters"``) or the time spent training
    (``x="seconds"``): each layer's mean over its seeds, and a band from the lowest to the highest seed
    at every evaluation. The time is each evaluation's step times ``step_s[kind]`` (seconds per step,
    measured apart, e.g. on a quiet machine), or without ``step_s`` the mean of the seeds' own clocks.
    ``runs``: ``{kind: [run of each seed]}``; ``baselines``: ``{label: loss}`` drawn as dotted lines."""
    if x not in ("characters", "seconds"):
        raise ValueError(f"x must be 'characters' or 'seconds', got {x!r}")
    fig = go.Figure()
    for kind, seeds in runs.items():
        colour, dash = style_of(kind)
        steps = np.array(seeds[0]["curves"]["val_step"])
        if any(list(r["curves"]["val_step"]) != list(steps) for r in seeds):
            raise ValueError(f"{kind}: the seeds were evaluated at different steps")
        losses = np.array([r["curves"]["val_loss"] for r in seeds])  # (seeds, evaluations)
        if x == "characters":
            xs, unit = steps * tokens_per_step / 1e6, "M characters"
        elif step_s is not None:
            xs, unit = steps * step_s[kind] / 60, "min"
        else:
            xs, unit = np.array([r["curves"]["val_train_s"] for r in seeds]).mean(0) / 60, "min"
        fig.add_trace(go.Scatter(x=np.concatenate([xs, xs[::-1]]),
                                 y=np.concatenate([losses.max(0), losses.min(0)[::-1]]),
                                 fill="toself", fillcolor=_rgba(colour, 0.18), line={"width": 0},
                                 legendgroup=kind, showlegend=False, hoverinfo="skip", name=f"{kind} seeds"))
        fig.add_trace(go.Scatter(x=xs, y=losses.mean(0), name=kind, legendgroup=kind, mode="lines",
                                 line={"color": colour, "dash": dash, "width": 2},
                                 customdata=np.stack([losses.min(0), losses.max(0)], -1),
                                 hovertemplate=(f"{kind}<br>%{{x:.2f}} {unit}<br>mean %{{y:.3f}}"
                                                "<br>seeds %{customdata[0]:.3f} to %{customdata[1]:.3f}"
                                                "<extra></extra>")))
    for label, value in (baselines or {}).items():
        fig.add_hline(y=value, line_dash="dot", line_color="grey", annotation_text=label,
                      annotation_position="top right")
    fig.update_xaxes(title="characters seen (millions)" if x == "characters"
                     else "time spent training, evaluations excluded (minutes)")
    fig.update_yaxes(title="validation loss (nats per character)")
    finish(fig, title=title, alt="Validation loss falling with training, one line per layer (the mean of its "
           "seeds) inside a band from its lowest to its highest seed; dotted lines mark count n-gram "
           "baselines.", height=480)
    return legend_below(fig)


def contrast_figure(rows: Sequence[tuple[str, Any]], *, x_title: str = "difference in final validation loss "
                    "(nats/char)", title: str | None = None) -> go.Figure:
    """One row per contrast ``(label, Contrast)``: each seed's gap (dots), the mean gap (a tick) with its
    t interval (a bar), and zero. A row whose bar crosses zero is not decided by these seeds."""
    fig = go.Figure()
    labels = [label for label, _ in rows]
    for label, c in rows:
        colour = style_of(c.a.kind)[0]
        fig.add_trace(go.Scatter(x=list(c.per_seed), y=[label] * len(c.per_seed), mode="markers",
                                 marker={"color": colour, "size": 10, "symbol": "circle-open"},
                                 showlegend=False,
                                 hovertemplate=f"{label}<br>one seed: %{{x:+.4f}}<extra></extra>"))
        low, high = c.interval
        fig.add_trace(go.Scatter(x=[c.gap], y=[label], mode="markers", showlegend=False,
                                 marker={"color": colour, "size": 16, "symbol": "line-ns-open",
                                         "line": {"width": 3, "color": colour}},
                                 error_x={"type": "data", "symmetric": False, "array": [high - c.gap],
                                          "arrayminus": [c.gap - low], "color": colour, "thickness": 1.5},
                                 hovertemplate=(f"{label}<br>mean gap %{{x:+.4f}}, {c.level:.0%} interval"
                                                f" {low:+.4f} to {high:+.4f} ({c.verdict})<extra></extra>")))
    fig.add_vline(x=0.0, line_color="grey", line_dash="dot")
    fig.update_xaxes(title=x_title, zeroline=False)
    fig.update_yaxes(categoryorder="array", categoryarray=labels[::-1], automargin=True)
    finish(fig, title=title, alt="For each pair of layers, the difference of their final losses seed by seed "
           "(open circles) and on average (a tick, with a bar for its interval); left of zero the first "
           "layer is lower.",
           height=120 + 44 * len(rows))
    return fig


def recall_state_figure(points: Mapping[str, Sequence[tuple[float, Sequence[float]]]], *,
                        chance: float | None = None, title: str | None = None) -> go.Figure:
    """Recall accuracy against the numbers a layer keeps per sequence (log scale), the axes of the Based
    paper's recall/state-size figure. ``points``: ``{kind: [(state size, [accuracy of each seed]), ...]}``;
    each point is the seeds' mean with a bar from the lowest to the highest seed."""
    fig = go.Figure()
    for kind, pts in points.items():
        colour, dash = style_of(kind)
        pts = sorted(pts, key=lambda p: p[0])
        x = [p[0] for p in pts]
        acc = [np.asarray(p[1], dtype=float) for p in pts]
        mean = [a.mean() for a in acc]
        above = [a.max() - m for a, m in zip(acc, mean, strict=True)]
        below = [m - a.min() for a, m in zip(acc, mean, strict=True)]
        fig.add_trace(go.Scatter(
            x=x, y=mean, name=kind, mode="lines+markers", line={"color": colour, "dash": dash},
            error_y={"type": "data", "symmetric": False, "array": above, "arrayminus": below,
                     "color": colour},
            hovertemplate=f"{kind}<br>%{{x:,}} numbers per layer<br>accuracy %{{y:.3f}}<extra></extra>"))
    if chance is not None:
        fig.add_hline(y=chance, line_dash="dot", line_color="grey", annotation_text="no lookup (best guess)",
                      annotation_position="top left")
    fig.update_xaxes(title="state per layer and sequence (numbers, log scale)", **log_axis())
    fig.update_yaxes(title="recall accuracy on held-out sequences", range=[-0.02, 1.05])
    finish(fig, title=title, alt="Recall accuracy of each layer against the size of what it keeps per "
           "sequence: a point per model width, the mean of the seeds with a bar from the lowest to the "
           "highest seed.", height=460)
    return legend_below(fig)


def recall_capacity_figure(points: Mapping[str, Sequence[tuple[int, float, Sequence[float]]]], *,
                           chance: Mapping[int, float] | None = None, title: str | None = None) -> go.Figure:
    """Recall accuracy against the number of key-value pairs at one width, to show where each layer's
    state runs out. ``points``: ``{kind: [(pairs, state size, [accuracy of each seed]), ...]}``; each
    point is the seeds' mean with a bar from the lowest to the highest seed; ``chance``: ``{pairs:
    the best accuracy that never reads a key}``."""
    fig = go.Figure()
    for kind, pts in points.items():
        colour, dash = style_of(kind)
        pts = sorted(pts, key=lambda p: p[0])
        acc = [np.asarray(p[2], dtype=float) for p in pts]
        mean = [a.mean() for a in acc]
        fig.add_trace(go.Scatter(
            x=[p[0] for p in pts], y=mean, customdata=[p[1] for p in pts], name=kind, mode="lines+markers",
            line={"color": colour, "dash": dash},
            error_y={"type": "data", "symmetric": False, "color": colour,
                     "array": [a.max() - m for a, m in zip(acc, mean, strict=True)],
                     "arrayminus": [m - a.min() for a, m in zip(acc, mean, strict=True)]},
            hovertemplate=f"{kind}<br>%{{x}} pairs<br>state %{{customdata:,}} numbers per layer"
                          "<br>accuracy %{y:.3f}<extra></extra>"))
    if chance:
        pairs = sorted(chance)
        fig.add_trace(go.Scatter(x=pairs, y=[chance[n] for n in pairs], name="no lookup (best guess)",
                                 mode="lines", line={"color": "grey", "dash": "dot"},
                                 hovertemplate="%{x} pairs: %{y:.3f} without reading a key<extra></extra>"))
    all_pairs = sorted({p[0] for pts in points.values() for p in pts})
    fig.update_xaxes(title="key-value pairs per sequence (log scale)", type="log", tickvals=all_pairs,
                     ticktext=[str(n) for n in all_pairs])
    fig.update_yaxes(title="recall accuracy on held-out sequences", range=[-0.02, 1.05])
    finish(fig, title=title, alt="Recall accuracy of each layer against the number of key-value pairs it "
           "must hold, at one model width: the mean of the seeds with a bar from the lowest to the highest "
           "seed, and the best accuracy that never reads a key.", height=460)
    return legend_below(fig)


def recall_heads_figure(points: Mapping[tuple[str, int, int], Sequence[float]], *,
                        state: Mapping[tuple[str, int], int], heads: Sequence[int], pairs: Sequence[int],
                        chance: Mapping[int, float] | None = None, title: str | None = None) -> go.Figure:
    """Recall at fixed parameters: one panel per number of pairs, accuracy against the heads (a linear
    layer keeps D^2 / H numbers, so more heads is a smaller state). ``points``: ``{(kind, heads, pairs):
    [accuracy of each seed]}`` (the points stored so far); ``state``: ``{(kind, heads): numbers kept per
    layer}``; ``heads`` and ``pairs``: the plan's axes, drawn whole while points are missing. Each point
    is the seeds' mean with a bar from the lowest to the highest seed."""
    pairs, heads = sorted(pairs), sorted(heads)
    if not all(h in heads and n in pairs for _, h, n in points):
        raise ValueError(f"every point's heads and pairs must be among heads={heads} and pairs={pairs}")
    fig = make_subplots(rows=1, cols=max(1, len(pairs)), shared_yaxes=True, horizontal_spacing=0.04,
                        subplot_titles=[f"{n} pairs" for n in pairs])
    kinds = list(dict.fromkeys(k for k, _, _ in points))
    for col, n in enumerate(pairs, start=1):
        for kind in kinds:
            colour, dash = style_of(kind)
            here = [(h, np.asarray(points[kind, h, n], dtype=float)) for h in heads if (kind, h, n) in points]
            if not here:
                continue
            mean = [a.mean() for _, a in here]
            fig.add_trace(go.Scatter(
                x=[h for h, _ in here], y=mean, name=kind, legendgroup=kind, showlegend=col == 1,
                mode="lines+markers", line={"color": colour, "dash": dash},
                customdata=[state.get((kind, h), 0) for h, _ in here],
                error_y={"type": "data", "symmetric": False, "color": colour,
                         "array": [a.max() - m for (_, a), m in zip(here, mean, strict=True)],
                         "arrayminus": [m - a.min() for (_, a), m in zip(here, mean, strict=True)]},
                hovertemplate=f"{kind}, {n} pairs<br>%{{x}} heads: %{{customdata:,}} numbers per layer"
                              "<br>accuracy %{y:.3f} (mean of the seeds)<extra></extra>"), row=1, col=col)
        if chance and n in chance:
            fig.add_trace(go.Scatter(x=heads, y=[chance[n]] * len(heads), name="no lookup (best guess)",
                                     legendgroup="chance", showlegend=col == 1, mode="lines",
                                     line={"color": "grey", "dash": "dot"},
                                     hovertemplate=f"{n} pairs: %{{y:.3f}} without a key<extra></extra>"),
                          row=1, col=col)
        fig.update_xaxes(title="heads (more: a smaller state)" if col == 1 else None, type="log",
                         tickvals=heads, ticktext=[str(h) for h in heads], row=1, col=col,
                         range=[np.log10(heads[0]) - 0.15, np.log10(heads[-1]) + 0.15])
    fig.update_yaxes(range=[-0.02, 1.05])
    fig.update_yaxes(title="recall accuracy, held out", row=1, col=1)
    finish(fig, title=title, alt="Recall accuracy of each layer against its number of heads at one width, "
           "one panel per number of key-value pairs: the mean of the seeds with a bar from the lowest to the "
           "highest seed, and the best accuracy that never reads a key.", height=460)
    return legend_below(fig)


def recall_curves_figure(panels: Mapping[str, Mapping[str, Mapping[int, Mapping[str, Any]]]], *,
                         chance: Mapping[str, float] | None = None, cols: int = 3,
                         title: str | None = None) -> go.Figure:
    """Held-out recall accuracy against the step, one panel per point and one line per run: has a
    point's curve flattened, and what did a longer run change? ``panels``: ``{panel title: {budget
    label: {seed: run}}}`` (a run as :mod:`linattn_core.lm.mqar` stores it); each seed keeps one colour,
    the first budget is drawn dotted, any between dashed and the last solid. ``chance``: ``{panel title:
    the best accuracy that never reads a key}``."""
    if not panels or cols < 1:
        raise ValueError(f"need at least one panel and cols >= 1, got {len(panels)} panels and cols={cols}")
    rows = -(-len(panels) // cols)
    # about 100 px between rows (a panel's tick labels and the next one's title) whatever the number of
    # rows: the spacing is a fraction of the figure's height
    fig = make_subplots(rows=rows, cols=min(cols, len(panels)), shared_yaxes=True, horizontal_spacing=0.04,
                        vertical_spacing=min(0.16, 100 / (280 * rows)) if rows > 1 else 0.0,
                        subplot_titles=list(panels))
    shown: set[str] = set()
    for i, (name, budgets) in enumerate(panels.items()):
        row, col = divmod(i, cols)
        labels = list(budgets)
        for j, label in enumerate(labels):
            dash = "solid" if j == len(labels) - 1 else "dot" if j == 0 else "dash"
            for seed, run in sorted(budgets[label].items()):
                c = run["curves"]
                legend = f"seed {seed}, {label}"
                fig.add_trace(go.Scatter(
                    x=c["val_step"], y=c["val_accuracy"], name=legend, legendgroup=legend,
                    showlegend=legend not in shown, mode="lines",
                    line={"color": PALETTE[seed % len(PALETTE)], "dash": dash,
                          "width": 2 if dash == "solid" else 1.5},
                    hovertemplate=f"{name}<br>seed {seed}, {label}<br>step %{{x:,}}: accuracy %{{y:.3f}}"
                                  "<extra></extra>"), row=row + 1, col=col + 1)
                shown.add(legend)
        if chance and name in chance:
            fig.add_hline(y=chance[name], line_dash="dot", line_color="grey", row=row + 1, col=col + 1)
        bottom = i + cols >= len(panels)  # no panel below this one in its column
        fig.update_xaxes(title="step" if bottom else None, row=row + 1, col=col + 1)
    fig.update_yaxes(range=[-0.02, 1.05])
    for row in range(1, rows + 1):
        fig.update_yaxes(title="recall accuracy, held out", row=row, col=1)
    finish(fig, title=title, alt="Held-out recall accuracy against the training step, one panel per point of "
           "the plan and one line per seed: the shortest runs dotted, any between dashed, the longest solid; "
           "the grey dotted line is the best accuracy that never reads a key.", height=140 + 280 * rows)
    return legend_below(fig)
