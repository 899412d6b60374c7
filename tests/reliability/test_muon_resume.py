"""optim=muon through train(): a run stopped after any step and resumed from its last.ckpt
ends with the weights and optimizer state of an uninterrupted run, to the bit; a checkpoint
of the other optimizer is refused in one line."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_dir

from helpers.lightning_doubles import StopAfter
from helpers.runs import reliability_overrides
from packlm.config.schema import CONFIG_DIR
from packlm.errors import ConfigError
from packlm.train import train

MUON = ("optim=muon", "trainer.accumulate_grad_batches=2", "optim.muon_momentum_warmup_steps=4")


def checkpoint(run):
    return torch.load(run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)


def assert_equal_states(a, b) -> None:
    assert a["global_step"] == b["global_step"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for k in a["state_dict"]:
        assert torch.equal(a["state_dict"][k], b["state_dict"][k]), k
    oa, ob = a["optimizer_states"][0], b["optimizer_states"][0]
    assert [g["name"] for g in oa["param_groups"]] == ["hidden", "embedding", "head", "vectors"]
    assert oa["param_groups"] == ob["param_groups"]  # lr, momentum, muon_steps, ...
    assert oa["state"].keys() == ob["state"].keys()
    for i in oa["state"]:
        for k, v in oa["state"][i].items():
            assert torch.equal(v, ob["state"][i][k]), (i, k)


@pytest.fixture(scope="module")
def muon_reference(tmp_path_factory, tiny_corpus, cache_dir):
    run = tmp_path_factory.mktemp("muon-reference")
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose("config", overrides=reliability_overrides(tiny_corpus, cache_dir, *MUON))
    train(cfg, run_dir=run)
    return checkpoint(run)


@pytest.mark.parametrize("stop", [1, 5])
def test_a_muon_run_resumed_after_any_step_is_bit_identical(
    compose_tiny, muon_reference, tmp_path, stop
):
    run = tmp_path / "run"
    train(compose_tiny(*MUON), run_dir=run, callbacks=[StopAfter(stop)])
    assert checkpoint(run)["global_step"] == stop
    last = run / "checkpoints" / "last.ckpt"
    train(compose_tiny(*MUON, f"ckpt_path={last}"))
    resumed = checkpoint(run)
    assert resumed["optimizer_states"][0]["param_groups"][0]["muon_steps"] == 8
    assert_equal_states(resumed, muon_reference)


def test_a_checkpoint_of_the_other_optimizer_is_refused(compose_tiny, muon_reference, tmp_path):
    run = tmp_path / "run"
    train(compose_tiny(), run_dir=run, callbacks=[StopAfter(1)])  # AdamW
    last = run / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"optim.algorithm=muon has \['hidden', .*init_from="):
        train(compose_tiny(*MUON, f"ckpt_path={last}"))
