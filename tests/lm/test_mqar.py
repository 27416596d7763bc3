"""Multi-query associative recall: the task's layout, its scoring on query positions only, seeded
batches, a short run that learns, and the stored full run reproduced from its first steps."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from linattn_core.lm import mqar


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (no spinning workers on a shared machine), and the
    stored run was trained on one thread, so its replay sums in the same order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_layout_pairs_then_queries():
    n, m, K, V = 5, 3, 8, 6
    x, y = mqar.make_batch(7, n, n_keys=K, n_values=V, n_queries=m, seed=1)
    assert x.shape == y.shape == (7, 2 * n + 2 * m) and x.dtype == y.dtype == torch.int64
    keys, values = x[:, 0 : 2 * n : 2], x[:, 1 : 2 * n : 2]
    assert bool(((keys >= 0) & (keys < K)).all()) and bool(((values >= K) & (values < K + V)).all())
    for row in keys:
        assert len(set(row.tolist())) == n  # the stored keys of a sequence are distinct
    queries = x[:, 2 * n :: 2]
    assert bool((y[:, : 2 * n] == mqar.IGNORE).all()) and bool((y[:, 2 * n + 1 :: 2] == mqar.IGNORE).all())
    for b in range(7):  # the target at each query key is the value stored under that key
        stored = dict(zip(keys[b].tolist(), values[b].tolist(), strict=True))
        for j, q in enumerate(queries[b].tolist()):
            assert y[b, 2 * n + 2 * j].item() == stored[q]
            assert x[b, 2 * n + 2 * j + 1].item() == stored[q]  # and the answer follows in the input


def test_seeded():
    a, b = mqar.make_batch(4, 3, seed=[0, 5]), mqar.make_batch(4, 3, seed=[0, 5])
    c = mqar.make_batch(4, 3, seed=[0, 6])
    assert all(torch.equal(s, t) for s, t in zip(a, b, strict=True))
    assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize("kwargs, name", [({"n_pairs": 9, "n_keys": 8}, "n_pairs"),
                                          ({"n_pairs": 3, "n_queries": 0}, "n_queries"),
                                          ({"n_pairs": 0}, "n_pairs"),
                                          ({"n_pairs": 2, "n_values": 0}, "n_values")])
def test_bad_sizes_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        mqar.make_batch(2, **kwargs)


def test_accuracy_counts_query_positions_only():
    x, y = mqar.make_batch(3, 4, seed=0)
    vocab = 32
    logits = torch.zeros(*x.shape, vocab)
    mask = y != mqar.IGNORE
    # right at every query position, wrong (token 0, never a value) everywhere else
    logits[..., 0] = 1.0
    logits[mask] = torch.nn.functional.one_hot(y[mask], vocab).float() * 2.0
    assert mqar.accuracy(logits, y) == 1.0
    # wrong at exactly one query position: accuracy drops by 1 / (number of queries)
    b, t = mask.nonzero()[0].tolist()
    logits[b, t] = 0.0
    logits[b, t, 1] = 5.0
    assert mqar.accuracy(logits, y) == pytest.approx(1 - 1 / int(mask.sum()))
    # the loss ignores non-query positions: changing them leaves it unchanged
    before = mqar.recall_loss(logits, y)
    logits[~mask] = torch.randn(int((~mask).sum()), vocab, generator=torch.Generator().manual_seed(0))
    assert mqar.recall_loss(logits, y).item() == before.item()


def test_chance_levels_exact():
    assert mqar.chance(16) == 1 / 16
    assert mqar.bag_chance(1, 16) == 1.0
    # a stored value at random, estimated on many sequences, against the exact expectation
    n, V = 4, 16
    x, y = mqar.make_batch(20000, n, n_values=V, seed=3)
    values = x[:, 1 : 2 * n : 2].numpy()
    answers = y[:, 2 * n :: 2].numpy()
    hits = (values[:, :, None] == answers[:, None, :]).mean(1)  # P(random stored value == answer)
    assert abs(hits.mean() - mqar.bag_chance(n, V)) < 0.01
    # the most frequent stored value: certain with one pair, at least the random pick otherwise
    assert mqar.mode_chance(1, V, samples=1000) == 1.0
    assert mqar.bag_chance(8, 8) < mqar.mode_chance(8, 8, samples=20000) < 1.0


@pytest.mark.parametrize("n_pairs, n_values, exact", [
    (2, 2, 0.75),  # equal values (1/2): a hit; two different values (1/2): a tie, right half the time
    (4, 2, 0.6875),  # 4-0 (2/16): 1; 3-1 (8/16): 3/4; 2-2 (6/16): a tie, 1/2 (ties as hits: 0.875)
    (2, 10**6, 0.5),  # two values that almost never agree: always a tie of two
])
def test_mode_chance_splits_ties(n_pairs, n_values, exact):
    # 100,000 sequences: the standard error is below 0.002
    assert abs(mqar.mode_chance(n_pairs, n_values) - exact) < 0.01


def test_short_run_learns():
    # 4 keys + 4 values: the loss starts near ln 8 and falls as soon as the model answers with values
    r = mqar.train_recall("softmax", 16, 2, 30, n_keys=4, n_values=4, lr=1e-2, warmup_steps=5,
                          batch_size=16, eval_batch=64, eval_interval=30)
    loss = r["curves"]["train_loss"]
    assert np.isfinite(loss).all() and len(loss) == 30
    assert np.mean(loss[-5:]) < np.mean(loss[:5]) - 0.1
    assert 0.0 <= r["final_accuracy"] <= 1.0 and r["chance"] == 0.25


def test_a_replay_without_evaluation_gives_the_same_training_losses():
    options = {"n_keys": 4, "n_values": 5, "n_head": 1, "conv": 2, "batch_size": 8, "eval_interval": 2}
    run = mqar.train_recall("deltanet", 8, 2, 6, **options)
    plain = mqar.train_recall("deltanet", 8, 2, 6, validate=False, **options)
    assert plain["curves"]["train_loss"] == run["curves"]["train_loss"] and plain["curves"]["val_step"] == []
    assert mqar.replay_losses(run, 3) == run["curves"]["train_loss"][:3]


def test_bad_kind():
    with pytest.raises(ValueError, match="kind"):
        mqar.train_recall("linear", 32, 2, 1)


TINY = ["--kinds", "softmax", "deltanet", "--widths", "8", "--pairs", "2", "--steps", "3", "--lr", "2e-3",
        "--seeds", "0", "1", "--conv", "2", "--n-keys", "4", "--n-values", "5", "--n-head", "1",
        "--no-progress"]


def test_cli_options_build_the_sweep_and_record_where_it_ran(tmp_path, capsys):
    out = tmp_path / "sweep.json"
    results = mqar.main([*TINY, "--json", str(out)])
    saved = json.loads(out.read_text())
    assert saved["command"] == "python -m linattn_core.mqar " + " ".join([*TINY, "--json", str(out)])
    assert len(saved["git_commit"] or "0" * 40) == 40 and saved["hardware"]["device"] == "cpu"
    sweep = saved["sweep"]
    assert (sweep["kinds"], sweep["widths"], sweep["pairs"], sweep["seeds"], sweep["steps"]) == (
        ["softmax", "deltanet"], [8], [2], [0, 1], 3)
    assert {k: sweep["options"][k] for k in ("lr", "conv", "n_keys", "n_values", "n_head")} == {
        "lr": 2e-3, "conv": 2, "n_keys": 4, "n_values": 5, "n_head": 1}
    ran = [tuple(r["config"][k] for k in ("attention", "n_embd", "n_pairs", "seed")) for r in saved["runs"]]
    assert ran == [("softmax", 8, 2, 0), ("softmax", 8, 2, 1), ("deltanet", 8, 2, 0), ("deltanet", 8, 2, 1)]
    assert all(r["state_size"] > 0 and "model" not in r for r in saved["runs"])
    assert len(results["runs"]) == 4
    # each run is seeded on its own: a run alone gives the numbers it gave inside the sweep
    alone = mqar.train_recall("deltanet", 8, 2, 3, **{**sweep["options"], "seed": 1})
    assert alone["curves"]["train_loss"] == saved["runs"][3]["curves"]["train_loss"]
    for bad in (["--kinds", "gated"], ["--threads", "0"]):
        with pytest.raises(SystemExit):
            mqar.main(bad)


def test_merge_puts_runs_in_sweep_order():
    preset = mqar.Preset(("softmax", "elu+1", "deltanet"), (8, 16), (2, 4), 10, {"lr": 1e-3}, seeds=(0, 1))

    def part(kind: str, commit: str = "abc", **changes) -> dict:
        runs = [{"config": {"attention": k, "n_embd": w, "n_pairs": n, "seed": s}}
                for k, w, n, s in preset.runs() if k == kind]
        sweep = {**preset.to_dict(), "kinds": [kind], **changes}
        return {"preset": "custom", "sweep": sweep, "git_commit": commit, "wall_s": 1.0, "runs": runs,
                "command": f"python -m linattn_core.mqar --kinds {kind}"}

    merged = mqar.merge([part(k) for k in reversed(preset.kinds)])
    got = [tuple(r["config"][k] for k in ("attention", "n_embd", "n_pairs", "seed")) for r in merged["runs"]]
    assert got == preset.runs() and merged["processes"] == 3
    assert merged["sweep"] == preset.to_dict()  # the kinds in the registry's order
    assert merged["git_commit"] == "abc" and set(merged["git_commits"].values()) == {"abc"}
    mixed = mqar.merge([part("softmax"), part("deltanet", "def")])
    assert mixed["git_commit"] is None and mixed["git_commits"] == {"softmax": "abc", "deltanet": "def"}
    with pytest.raises(ValueError, match="sweeps"):
        mqar.merge([part("softmax"), part("deltanet", steps=20)])


def test_the_defaults_are_the_chapters_recipe():
    """A reader who calls train_recall as the chapter shows trains the chapter's task and model."""
    from linattn_core.lm.mqar import PRESETS, RecallConfig

    default = RecallConfig()
    for name, value in PRESETS["capacity"].options.items():
        assert getattr(default, name) == value or name == "lr", name  # the rate is swept, per layer


@pytest.mark.parametrize("option, value, match", [
    ("lr", "1e-3", r"lr must be a number.*float\(rate\)"), ("lr", 0.0, "lr must be > 0"),
    ("lr", float("nan"), "lr must be a number"), ("weight_decay", -0.1, "weight_decay >= 0"),
    ("attention", "linear", "attention must be one of"), ("n_head", 3, "divisible by n_head"),
    ("batch_size", 0, "batch_size must be a positive int"), ("warmup_steps", -1, "warmup_steps"),
    ("steps", True, "steps must be a positive int")])
def test_a_bad_option_is_refused_by_name_before_training(option, value, match):
    from linattn_core.lm.mqar import RecallConfig

    with pytest.raises(ValueError, match=match):
        RecallConfig(**{option: value})
