"""optim.schedule=wsd: warmup, flat, a linear warmdown over the last warmdown_ratio."""

from __future__ import annotations

import math
from functools import partial

import pytest

from packlm.config.model import OptimConfig
from packlm.errors import ConfigError
from packlm.model.schedule import lr_factor

wsd = partial(lr_factor, warmup=10, total=110, min_ratio=0.1, shape="wsd", warmdown=0.2)


def test_wsd_is_flat_then_linear_down_to_min_ratio():
    assert wsd(0) == pytest.approx(0.1) and wsd(9) == 1.0  # the same warmup as cosine
    assert wsd(10) == 1.0 and wsd(89) == 1.0 and wsd(90) == 1.0  # flat for 80% of 100 steps
    assert wsd(100) == pytest.approx(0.55)  # half-way down the warmdown
    assert wsd(110) == pytest.approx(0.1) and wsd(10**6) == pytest.approx(0.1)
    steps = [wsd(s) for s in range(90, 111)]
    assert all(a >= b for a, b in zip(steps, steps[1:], strict=False))  # never rises
    # the time limit's share moves it like the cosine's (anneal_by_time)
    assert wsd(20, on_time=0.9) == pytest.approx(0.55) and wsd(20, on_time=0.5) == 1.0
    assert partial(wsd, total=math.inf)(10**6) == 1.0  # no horizon: flat
    assert partial(wsd, warmdown=1.0)(60) == pytest.approx(0.55)  # all warmdown: linear


def test_the_schedule_keys_are_checked():
    with pytest.raises(ConfigError, match=r"optim.schedule='linear': allowed \['cosine', 'wsd'\]"):
        OptimConfig.from_mapping({"schedule": "linear"})
    for bad in (0, 1.5, -0.2, True, "half"):
        with pytest.raises(ConfigError, match=r"optim.warmdown_ratio=.*: must be in \(0, 1\]"):
            OptimConfig.from_mapping({"schedule": "wsd", "warmdown_ratio": bad})


def test_lit_module_runs_the_wsd_schedule():
    import torch

    from helpers.models import tiny_config
    from packlm.model.lit_module import LitCausalLM

    config = {"warmup_steps": 0, "max_steps": 10, "schedule": "wsd", "warmdown_ratio": 0.5}
    lit = LitCausalLM(tiny_config(), {**config, "lr": 1e-3, "min_lr_ratio": 0.0})
    conf = lit.configure_optimizers()
    lrs = []
    for _ in range(10):
        lrs.append(conf["optimizer"].param_groups[0]["lr"])
        for p in lit.parameters():
            p.grad = torch.zeros_like(p)
        conf["optimizer"].step()
        conf["lr_scheduler"]["scheduler"].step()
    assert lrs == pytest.approx([1e-3] * 6 + [8e-4, 6e-4, 4e-4, 2e-4])
