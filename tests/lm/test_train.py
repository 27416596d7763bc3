"""Training: seeded and deterministic, resumable without changing a bit, results as a JSON object."""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from linattn_core.lm import train as T  # noqa: E402 - after the importorskip
from linattn_core.lm.data import Corpus  # noqa: E402

TINY = T.TrainConfig(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, max_steps=6, lr=3e-3,
                     warmup_steps=2, eval_interval=2, eval_batches=2, chunk_size=8)


@pytest.fixture(scope="module")
def corpus():
    rng = np.random.default_rng(0)
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "\n"]
    return Corpus.from_texts({"x_gut.txt": " ".join(rng.choice(words, 3000))})


def _params(model):
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("kind", ["softmax", "elu+1", "gla", "deltanet"])
def test_same_seed_same_losses(corpus, kind):
    cfg = replace(TINY, attention=kind)
    a = T.train(cfg, corpus, device="cpu", progress=False)
    b = T.train(cfg, corpus, device="cpu", progress=False)
    assert a["curves"]["train_loss"] == b["curves"]["train_loss"]
    assert a["curves"]["val_loss"] == b["curves"]["val_loss"]
    other = T.train(replace(cfg, seed=1), corpus, device="cpu", progress=False)
    assert other["curves"]["train_loss"] != a["curves"]["train_loss"]


@pytest.mark.parametrize("kind", ["softmax", "retnet"])
def test_resume_equals_uninterrupted(corpus, tmp_path, kind):
    cfg = replace(TINY, attention=kind, max_steps=7, eval_interval=3)
    whole = T.train(cfg, corpus, device="cpu", progress=False)
    ckpt = tmp_path / "run.pt"
    first = T.train(cfg, corpus, device="cpu", checkpoint=ckpt, stop_after=4, progress=False)
    assert first["steps_done"] == 4 and len(first["curves"]["train_loss"]) == 4
    rest = T.train(cfg, corpus, device="cpu", checkpoint=ckpt, resume=True, progress=False)
    assert rest["steps_done"] == 7
    timing = "val_train_s"  # seconds, measured: the one curve that differs between two runs
    assert {k: v for k, v in rest["curves"].items() if k != timing} == \
        {k: v for k, v in whole["curves"].items() if k != timing}
    assert len(rest["curves"][timing]) == len(whole["curves"][timing])
    assert rest["curves"][timing][-1] > first["curves"][timing][-1]  # the seconds carried over the resume
    for p, q in zip(_params(rest["model"]), _params(whole["model"]), strict=True):
        assert torch.equal(p, q)


@pytest.mark.parametrize("kind", ["softmax", "performer", "gla"])
def test_validation_changes_nothing_training_reads(corpus, kind):
    # replay_losses skips the validation: the training losses must be those of a validated run
    cfg = replace(TINY, attention=kind, eval_interval=2)
    validated = T.train(cfg, corpus, device="cpu", progress=False)
    plain = T.train(cfg, corpus, device="cpu", progress=False, validate=False)
    assert plain["curves"]["train_loss"] == validated["curves"]["train_loss"]
    assert plain["curves"]["val_step"] == [] and len(validated["curves"]["val_step"]) == 4
    assert T.replay_losses(validated, corpus, 4) == validated["curves"]["train_loss"][:4]


def test_resume_refuses_another_configuration(corpus, tmp_path):
    ckpt = tmp_path / "run.pt"
    T.train(TINY, corpus, device="cpu", checkpoint=ckpt, stop_after=2, progress=False)
    with pytest.raises(ValueError, match="another configuration"):
        T.train(replace(TINY, lr=1e-3), corpus, device="cpu", checkpoint=ckpt, resume=True, progress=False)
    with pytest.raises(FileNotFoundError, match="checkpoint"):
        T.train(TINY, corpus, device="cpu", checkpoint=tmp_path / "absent.pt", resume=True, progress=False)


def test_results_json_schema(corpus, tmp_path):
    results = T.train(TINY, corpus, device="cpu", progress=False)
    path = tmp_path / "out" / "r.json"
    T.save_results(results, path)
    saved = json.loads(path.read_text())
    assert set(saved) >= {"config", "model_config", "parameters", "steps_done", "git_commit", "hardware",
                          "wall_s", "tokens_per_s", "final_val_loss", "unigram_entropy", "curves"}
    assert "model" not in saved
    assert saved["config"] == asdict(TINY)
    assert saved["hardware"]["device"] == "cpu" and saved["wall_s"] > 0
    curves = saved["curves"]
    assert curves["step"] == list(range(6)) and len(curves["train_loss"]) == len(curves["lr"]) == 6
    assert curves["val_step"] == [0, 2, 4, 6] and len(curves["val_loss"]) == 4
    assert saved["final_val_loss"] == curves["val_loss"][-1]
    assert all(np.isfinite(curves["train_loss"]))


def test_results_json_keeps_the_first_steps_then_every_tenth(corpus, tmp_path):
    results = T.train(replace(TINY, max_steps=25, eval_interval=25), corpus, device="cpu", progress=False)
    T.save_results(results, tmp_path / "r.json")
    curves = json.loads((tmp_path / "r.json").read_text())["curves"]
    assert curves["step"] == [*range(T.FIRST_LOSSES), 10, 20] and T.LOSS_STRIDE == 10
    kept = curves["step"]
    assert curves["train_loss"] == [results["curves"]["train_loss"][i] for i in kept]
    assert curves["lr"] == [results["curves"]["lr"][i] for i in kept]
    assert curves["val_step"] == [0, 25]


def test_cli_threads_are_checked_and_the_command_recorded(monkeypatch, corpus, tmp_path):
    for bad in (["--threads", "0"], ["--lr", "-1"], ["--conv", "-2"], ["--attention", "gated"]):
        with pytest.raises(SystemExit):
            T.main(bad)
    monkeypatch.setattr(T, "load_corpus", lambda: corpus)
    monkeypatch.setitem(T.PRESETS, "book", TINY)
    before = torch.get_num_threads()
    try:
        out = tmp_path / "r.json"
        args = f"--attention relu --threads 1 --lr 2e-3 --conv 3 --seed 4 --steps 3 --no-progress --out {out}"
        T.main(args.split())
        saved = json.loads(out.read_text())
        assert saved["hardware"]["threads"] == 1
        assert saved["command"] == f"python -m linattn_core.train {args}"
        want = asdict(replace(TINY, attention="relu", lr=2e-3, conv=3, seed=4, max_steps=3))
        assert saved["config"] == want and saved["preset"] == "book"
        assert saved["model_config"]["conv"] == 3 and saved["steps_done"] == 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("kind", ["softmax", "gla", "deltanet"])
def test_weight_decay_reaches_matrices_only(corpus, kind):
    """AdamW decays weights, embeddings and conv filters, never a bias or a norm's gain."""
    model = T.LanguageModel(replace(TINY, attention=kind, conv=3).model_config(corpus.vocab_size))
    opt = T.make_optimizer(model, TINY)
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    assert all(g["weight_decay"] in (0.0, TINY.weight_decay) for g in opt.param_groups)
    counted = {id(p) for g in opt.param_groups for p in g["params"]}
    assert counted == {id(p) for p in model.parameters()}  # every parameter is trained
    norms = (torch.nn.LayerNorm, torch.nn.RMSNorm)
    never, always = [], []
    for name, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if pname == "bias" or isinstance(module, norms):
                never.append((f"{name}.{pname}", p))
            elif isinstance(module, (torch.nn.Linear, torch.nn.Embedding, torch.nn.Conv1d)):
                always.append((f"{name}.{pname}", p))
    assert any(isinstance(m, torch.nn.RMSNorm) for m in model.modules()) == (kind != "softmax")
    assert never and always
    assert [n for n, p in never if id(p) in decayed] == []
    assert [n for n, p in always if id(p) not in decayed] == []


def test_learning_rate_schedule():
    cfg = replace(TINY, max_steps=100, warmup_steps=10, lr=1.0, min_lr_ratio=0.1)
    lrs = [T.lr_at(s, cfg) for s in range(101)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(1.0) and lrs[100] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))


def test_a_short_run_learns(corpus):
    cfg = replace(TINY, max_steps=60, eval_interval=30, lr=1e-2, warmup_steps=5)
    results = T.train(cfg, corpus, device="cpu", progress=False)
    assert results["final_val_loss"] < results["curves"]["val_loss"][0] - 0.5


def test_bad_arguments(corpus):
    with pytest.raises(ValueError, match="device"):
        T.pick_device("tpu")
    with pytest.raises(ValueError, match="attention"):
        T.train(replace(TINY, attention="linear"), corpus, progress=False)
    with pytest.raises(ValueError, match="block_size"):
        T.get_batch(np.arange(5), 2, 8, np.random.default_rng(0))


def _loss_blowing_up_at(step_no):
    """lm_loss, but infinite on the ``step_no``-th call (the model, data and gradients stay real)."""
    calls, real = itertools.count(), T.lm_loss

    def loss(logits, targets):
        value = real(logits, targets)
        return value * float("inf") if next(calls) == step_no else value

    return loss


def test_a_run_that_diverges_stops_there_unapplied_and_says_so(corpus):
    # the same run interrupted after 3 steps (same schedule): the weights the diverged run must keep
    clean = T.train(TINY, corpus, device="cpu", stop_after=3, progress=False, validate=False)
    # validate=False: every call of the loss is a training step, so the 4th is step 3
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(T, "lm_loss", _loss_blowing_up_at(3))
        run = T.train(TINY, corpus, device="cpu", progress=False, validate=False)
    assert run["diverged_at"] == 3 and run["steps_done"] == 3 and run["final_val_loss"] is None
    assert run["curves"]["step"] == [0, 1, 2, 3] and not np.isfinite(run["curves"]["train_loss"][-1])
    for p, q in zip(_params(run["model"]), _params(clean["model"]), strict=True):
        assert torch.equal(p, q)  # the infinite step changed no weight
    assert clean["diverged_at"] is None


def test_the_cli_writes_a_diverged_run_and_exits_with_its_status(monkeypatch, corpus, tmp_path, capsys):
    monkeypatch.setattr(T, "load_corpus", lambda: corpus)
    monkeypatch.setitem(T.PRESETS, "book", replace(TINY, eval_interval=100))
    # validation runs at step 0 and calls the loss too (eval_batches of them) before training step 0
    monkeypatch.setattr(T, "lm_loss", _loss_blowing_up_at(TINY.eval_batches + 2))
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as stop:
        T.main(["--threads", "1", "--lr", "3e-2", "--no-progress", "--out", str(out)])
    assert stop.value.code == T.DIVERGED == 3
    saved = json.loads(out.read_text())
    assert saved["diverged_at"] == 2 and saved["final_val_loss"] is None and saved["steps_done"] == 2
    assert saved["curves"]["val_step"] == [0]  # no evaluation of the stopped model
    assert "diverged at step 2" in capsys.readouterr().err


def test_a_finite_loss_with_a_gradient_that_is_not_finite_is_not_applied():
    # the loss is finite (sqrt(0) = 0) but its gradient is infinite: clipping would turn it into NaN
    # weights (inf * 0), so the step must be refused, as for an infinite loss
    model = torch.nn.Linear(3, 1)
    with torch.no_grad():
        model.weight.zero_()
    opt = T.make_optimizer(model, TINY)
    before = _params(model)
    loss = torch.sqrt(model.weight).sum() + model.bias.sum() ** 2
    assert torch.isfinite(loss)
    assert T.optimizer_step(opt, model, loss, lr=1e-3, grad_clip=1.0) is False
    assert all(torch.equal(p, q) for p, q in zip(_params(model), before, strict=True))
    assert not opt.state, "the optimizer stepped"
    # and the same model with a finite gradient steps
    loss = (model.weight - 1).square().sum()
    assert T.optimizer_step(opt, model, loss, lr=1e-3, grad_clip=1.0) is True
    assert not torch.equal(model.weight, before[0])
