"""Resuming and starting from checkpoints across issue 61's optimizers and model options: a
resume into the other optimizer is one line naming optim.algorithm, before any work and
without touching the run's checkpoint; init_from takes the weights (only) across optimizers
and Muon's Newton-Schulz precision may change on a resume."""

from __future__ import annotations

import lightning as L
import pytest
import torch

from helpers.lightning_doubles import StopAfter
from packlm.errors import ConfigError
from packlm.train import train

MUON = ("optim=muon", "optim.muon_momentum_warmup_steps=4")


class FirstWeights(L.Callback):
    """The module's weights when fitting starts (after init_from loaded them)."""

    def __init__(self):
        self.weights: dict[str, torch.Tensor] = {}

    def on_train_start(self, trainer, pl_module):
        self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_corpus, cache_dir):
    """(AdamW's last.ckpt, Muon's last.ckpt) after 2 steps each, the model options on."""
    from hydra import compose, initialize_config_dir

    from helpers.runs import reliability_overrides
    from packlm.config.schema import CONFIG_DIR

    out = {}
    for name, extra in (("adamw", ()), ("muon", MUON)):
        run = tmp_path_factory.mktemp(name)
        overrides = reliability_overrides(tiny_corpus, cache_dir, *extra, *OPTIONS)
        with initialize_config_dir(CONFIG_DIR, version_base=None):
            cfg = compose("config", overrides=overrides)
        train(cfg, run_dir=run, callbacks=[StopAfter(2)])
        out[name] = run / "checkpoints" / "last.ckpt"
    return out


OPTIONS = ("model.qk_norm=true", "model.mlp=relu2", "model.residual_scalars=true",
           "model.logit_softcap=15", "optim.schedule=wsd")  # fmt: skip


def test_a_muon_checkpoint_resumed_with_adamw_is_one_line_and_kept(compose_tiny, runs):
    ckpt = runs["muon"]
    before = ckpt.read_bytes()
    with pytest.raises(ConfigError) as e:
        train(compose_tiny(*OPTIONS, f"ckpt_path={ckpt}"))
    message = str(e.value)
    assert "\n" not in message
    assert "optim.algorithm=adamw has ['matrices', 'embedding', 'vectors']" in message
    assert "['hidden', 'embedding', 'head', 'vectors']" in message and "init_from=" in message
    assert ckpt.read_bytes() == before  # the run's checkpoint untouched


@pytest.mark.parametrize(("source", "extra"), [("adamw", MUON), ("muon", ())])
def test_init_from_the_other_optimizer_takes_the_weights_only(
    compose_tiny, runs, tmp_path, source, extra
):
    first = FirstWeights()
    run = tmp_path / "run"
    train(compose_tiny(*extra, *OPTIONS, f"init_from={runs[source]}"), run_dir=run,
          callbacks=[first, StopAfter(1)])  # fmt: skip
    saved = load(runs[source])
    assert first.weights.keys() == saved["state_dict"].keys()
    for key, value in saved["state_dict"].items():
        assert torch.equal(first.weights[key], value), key
    new = load(run / "checkpoints" / "last.ckpt")
    assert new["global_step"] == 1  # a new run: its own steps, optimizer and schedule
    names = [g["name"] for g in new["optimizer_states"][0]["param_groups"]]
    assert names == (["hidden", "embedding", "head", "vectors"] if extra else
                     ["matrices", "embedding", "vectors"])  # fmt: skip


def test_a_muon_resume_may_change_the_newton_schulz_precision(compose_tiny, runs, tmp_path):
    """float32 (packlm's loop) and bfloat16 (torch.optim.Muon) keep the same state names, so
    the momentum buffers carry over and the step count goes on."""
    run = tmp_path / "run"
    train(compose_tiny(*MUON, *OPTIONS, "optim.muon_ns_dtype=float32"), run_dir=run,
          callbacks=[StopAfter(2)])  # fmt: skip
    ckpt = run / "checkpoints" / "last.ckpt"
    train(compose_tiny(*MUON, *OPTIONS, "optim.muon_ns_dtype=bfloat16", f"ckpt_path={ckpt}",
                       "trainer.max_steps=4"))  # fmt: skip
    resumed = load(ckpt)
    assert resumed["global_step"] == 4
    (hidden, *_) = resumed["optimizer_states"][0]["param_groups"]
    assert hidden["name"] == "hidden" and hidden["muon_steps"] == 4
    for key, value in resumed["state_dict"].items():
        assert torch.isfinite(value).all(), key
