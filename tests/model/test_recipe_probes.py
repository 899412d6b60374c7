"""Adversarial probes of issue 61's recipe options (optim=muon, qk_norm, mlp=relu2,
zero_init_proj, logit_softcap, residual_scalars, schedule=wsd, anneal_by_time): bad values as
a dict or as typed on train.py's command line are one line naming the key; Muon's
Newton-Schulz keeps zero and tiny gradients finite; the param groups hold every parameter
once under every combination of options; the wsd schedule ends at min_lr_ratio, never below."""

from __future__ import annotations

import itertools
import math
import subprocess
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.trainer.states import RunningStage
from torch.utils.data import DataLoader

from helpers.models import pack_row, random_docs
from helpers.runs import subprocess_env, train_command
from packlm.config.model import ModelConfig, OptimConfig
from packlm.errors import ConfigError
from packlm.model.lit_module import LitCausalLM
from packlm.model.muon import muon_update, newton_schulz
from packlm.model.schedule import lr_factor

TINY = dict(vocab_size=61, context_length=16, n_layer=2, n_head=2, n_embd=16)

# --- config values: one ConfigError naming the key ------------------------------------------


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"algorithm": "muon", "muon_lr": 0}, "optim.muon_lr"),
        ({"algorithm": "muon", "muon_lr": -0.02}, "optim.muon_lr"),
        ({"algorithm": "muon", "muon_lr": "fast"}, "optim.muon_lr"),
        ({"algorithm": "muon", "muon_lr": float("nan")}, "optim.muon_lr"),
        ({"algorithm": "muon", "muon_ns_steps": -1}, "optim.muon_ns_steps"),
        ({"algorithm": "muon", "muon_ns_steps": 2.5}, "optim.muon_ns_steps"),
        ({"algorithm": "muon", "muon_ns_steps": True}, "optim.muon_ns_steps"),
        ({"algorithm": "muon", "muon_momentum": 1.5}, "optim.muon_momentum"),
        ({"algorithm": "muon", "muon_momentum": -0.1}, "optim.muon_momentum"),
        ({"algorithm": "muon", "muon_momentum_start": float("inf")}, "optim.muon_momentum_start"),
        (
            {"algorithm": "muon", "muon_momentum_warmup_steps": -1},
            "optim.muon_momentum_warmup_steps",
        ),
        ({"algorithm": "muon", "muon_ns_dtype": "fp16"}, "optim.muon_ns_dtype"),
        ({"algorithm": "muon", "muon_ns_dtype": "bf16"}, "optim.muon_ns_dtype"),
        ({"schedule": "WSD"}, "optim.schedule"),
        ({"schedule": "wsd", "warmdown_ratio": float("nan")}, "optim.warmdown_ratio"),
        # were accepted: a weight decay whose 1 - lr * decay <= 0 zeroes or flips the weights
        # at every step (muon_weight_decay=1e30: 950 steps of NaN, then exit 1)
        ({"algorithm": "muon", "muon_weight_decay": 1e30}, "optim.muon_weight_decay"),
        ({"algorithm": "muon", "muon_weight_decay": 50.0}, "optim.muon_weight_decay"),
        ({"weight_decay": 40.0}, "optim.weight_decay"),  # embedding: 3e-3 * 10 * 40 = 1.2
        ({"weight_decay": 400.0, "embedding_lr_ratio": 0.5}, "optim.weight_decay"),  # lr's
        # were accepted: a string is truthy, so "false" turned the time annealing on
        ({"anneal_by_time": "false"}, "optim.anneal_by_time"),
        ({"anneal_by_time": 1}, "optim.anneal_by_time"),
        ({"warmup_steps": True}, "optim.warmup_steps"),  # True == 1, not a count
        # were a TypeError traceback ('<=' not supported between 'float' and 'str')
        ({"min_lr_ratio": "low"}, "optim.min_lr_ratio"),
        ({"betas": ["a", "b"]}, "optim.betas"),
        ({"betas": [True, 0.9]}, "optim.betas"),
    ],
)
def test_bad_optim_values_are_one_config_error_naming_the_key(values, key):
    with pytest.raises(ConfigError, match=rf"^{key}=") as e:
        OptimConfig.from_mapping(values)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"logit_softcap": float("nan")}, "model.logit_softcap"),
        ({"logit_softcap": float("inf")}, "model.logit_softcap"),  # inf * tanh(x / inf): NaN
        ({"logit_softcap": "15"}, "model.logit_softcap"),
        ({"logit_softcap": 0}, "model.logit_softcap"),
        ({"logit_softcap": True}, "model.logit_softcap"),
        ({"mlp": "ReLU2"}, "model.mlp"),
        ({"mlp": "relu"}, "model.mlp"),
        # were accepted and on: any non-empty string is truthy, "false" too
        ({"qk_norm": "yes"}, "model.qk_norm"),
        ({"qk_norm": "false"}, "model.qk_norm"),
        ({"residual_scalars": 1}, "model.residual_scalars"),
        ({"zero_init_proj": "true"}, "model.zero_init_proj"),
        ({"tie_embeddings": "no"}, "model.tie_embeddings"),
        ({"qk_norm": None}, "model.qk_norm"),
        # was accepted: the MLP's hidden width rounded to 0 (every block's MLP a zero map)
        ({"mlp_ratio": 1e-9}, "model.mlp_ratio"),
        ({"mlp_ratio": 1e-9, "mlp": "relu2"}, "model.mlp_ratio"),
    ],
)
def test_bad_model_values_are_one_config_error_naming_the_key(values, key):
    with pytest.raises(ConfigError, match=rf"^{key}=") as e:
        ModelConfig.from_mapping(values)
    assert "\n" not in str(e.value)


def test_the_edges_that_are_valid_stay_valid():
    OptimConfig.from_mapping({"schedule": "wsd", "warmdown_ratio": 1})  # all warmdown
    OptimConfig.from_mapping({"algorithm": "muon", "muon_momentum": 0, "muon_ns_steps": 20})
    OptimConfig.from_mapping({"algorithm": "muon", "muon_weight_decay": 49.0})  # 0.02 * 49 < 1
    OptimConfig.from_mapping({"weight_decay": 33.0})  # 3e-3 * 10 * 33 = 0.99
    OptimConfig.from_mapping({"muon_weight_decay": 1e6})  # optim=adamw: not used, not checked
    OptimConfig.from_mapping({"anneal_by_time": True, "min_lr_ratio": 0})
    ModelConfig.from_mapping({"logit_softcap": 15, "mlp": "relu2", "qk_norm": True})
    ModelConfig.from_mapping({"mlp_ratio": 0.25, "n_embd": 16, "n_head": 2})  # 4 -> 32 wide


BAD_ON_THE_COMMAND_LINE = [
    ("optim=muon optim.muon_lr=fast", "optim.muon_lr"),
    ("optim=muon optim.muon_lr=nan", "optim.muon_lr"),
    ("optim=muon optim.muon_lr=-1", "optim.muon_lr"),
    ("optim=muon optim.muon_ns_steps=2.5", "optim.muon_ns_steps"),
    ("optim=muon optim.muon_ns_steps=1000000000", "optim.muon_ns_steps"),
    ("optim=muon optim.muon_momentum=1.0", "optim.muon_momentum"),
    ("optim=muon optim.muon_ns_dtype=fp16", "optim.muon_ns_dtype"),
    ("optim=muon optim.muon_weight_decay=1e30", "optim.muon_weight_decay"),  # trained, NaN
    ("optim.schedule=linear", "optim.schedule"),
    ("optim.schedule=wsd optim.warmdown_ratio=0", "optim.warmdown_ratio"),
    ("model.logit_softcap=inf", "model.logit_softcap"),
    ("model.mlp=ReLU2", "model.mlp"),
    ("model.qk_norm=maybe", "model.qk_norm"),
    ("model.mlp_ratio=0.000001", "model.mlp_ratio"),  # trained with a 0-wide MLP
]


@pytest.mark.parametrize(("typed", "key"), BAD_ON_THE_COMMAND_LINE)
def test_a_bad_recipe_value_on_the_command_line_is_one_line_before_any_work(typed, key, tmp_path):
    cache = tmp_path / "cache"
    args = [*typed.split(), f"cache_dir={cache}", f"hydra.run.dir={tmp_path / 'run'}"]
    done = subprocess.run(
        train_command(*args), cwd=tmp_path, env=subprocess_env(), capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {key}="), last
    assert not cache.exists() and not (tmp_path / "run").exists()  # nothing built or written


# --- the wsd schedule -------------------------------------------------------------------------


@pytest.mark.parametrize("min_ratio", [0.0, 0.1])
@pytest.mark.parametrize("warmdown", [1e-17, 0.01, 0.07, 0.2, 0.3, 1.0])
def test_wsd_never_goes_below_min_lr_ratio_and_ends_exactly_there(min_ratio, warmdown):
    """Before: 1 - warmdown rounding gave min_lr_ratio=0 a negative lr at the end (-8.9e-16
    with warmdown_ratio=0.01, at 6766 of 40,000 horizons and ratios), and a tiny
    warmdown_ratio ended the run at the peak lr."""
    for warmup, total in [(0, 1), (0, 7), (3, 50), (10, 113), (0, 300)]:
        values = [
            lr_factor(s, warmup, total, min_ratio, shape="wsd", warmdown=warmdown)
            for s in range(total + 3)
        ]
        assert all(math.isfinite(v) and min_ratio <= v <= 1.0 for v in values), values
        after = values[max(warmup, 1) :]
        assert all(a >= b for a, b in itertools.pairwise(after))  # never rises after warmup
        assert values[total] == min_ratio and values[-1] == min_ratio


def test_wsd_with_the_warmup_past_the_horizon_or_the_time_up_stays_in_range():
    # warmup_steps >= max_steps: the run ends inside the warmup (as the cosine), never above 1
    assert [lr_factor(s, 100, 50, 0.1, shape="wsd") for s in (0, 49)] == [0.01, 0.5]
    # anneal_by_time with the time spent (a 1-second max_time: the share runs past 1)
    for on_time in (1.0, 5.0, 1e9):
        assert lr_factor(20, 10, 110, 0.1, on_time=on_time, shape="wsd") == 0.1
        assert lr_factor(20, 10, math.inf, 0.0, on_time=on_time, shape="wsd") == 0.0


# --- Newton-Schulz on zero and tiny gradients ---------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("scale", [0.0, 1e-30, 1e-45, 1e-20])
@pytest.mark.parametrize("shape", [(8, 16), (16, 8)])
def test_newton_schulz_keeps_a_zero_or_tiny_gradient_finite(dtype, scale, shape):
    torch.manual_seed(0)
    g = torch.randn(shape) * scale  # 1e-45: float32 subnormals, whose norm underflows to 0
    x = newton_schulz(g, 5, dtype)
    assert x.shape == g.shape and torch.isfinite(x).all()
    assert x.float().abs().max() <= 1.5  # never more than the orthogonal update's size
    if scale == 0.0:
        assert not x.any()


def test_a_zero_gradient_muon_step_moves_nothing_but_the_decay():
    p = torch.nn.Parameter(torch.randn(8, 16))
    p.grad = torch.zeros_like(p)
    before, buf = p.detach().clone(), torch.zeros_like(p)
    muon_update([p], [buf], lr=0.02, weight_decay=0.5, momentum=0.95, nesterov=True,
                ns_steps=5, dtype=torch.float32)  # fmt: skip
    assert torch.equal(p.detach(), before * (1 - 0.02 * 0.5)) and not buf.any()


@pytest.mark.parametrize("ns_dtype", ["float32", "bfloat16"])
def test_zero_init_proj_under_muon_steps_finitely_from_zero_gradients(ns_dtype):
    """zero_init_proj: at step 0 every matrix before a zero projection (qkv, the MLP's up)
    has an all-zero gradient; Muon must leave it as it is, not NaN."""
    torch.manual_seed(0)
    lit = LitCausalLM(dict(TINY, zero_init_proj=True, qk_norm=True, residual_scalars=True),
                      {"algorithm": "muon", "muon_ns_dtype": ns_dtype})  # fmt: skip
    opt = lit._optimizer()
    batch = pack_row(random_docs([9, 7], 1), 16)
    lit._sum_ce(batch)[0].backward()
    zero = {n for n, p in lit.named_parameters() if p.grad is not None and not p.grad.any()}
    assert {n for n in zero if "qkv" in n or "gate_up" in n} == {
        f"model.blocks.{i}.{m}.weight" for i in range(2) for m in ("attn.qkv", "mlp.gate_up")
    }
    before = {n: p.detach().clone() for n, p in lit.named_parameters()}
    opt.step()
    for n, p in lit.named_parameters():
        assert torch.isfinite(p).all(), n
        if n in zero and p.dim() == 2:
            assert torch.equal(p.detach(), before[n]), n  # muon_weight_decay 0: unmoved
    assert not torch.equal(
        lit.model.blocks[0].attn.proj.weight, before["model.blocks.0.attn.proj.weight"]
    )


# --- the param groups under every combination -------------------------------------------------

OPTIONS = list(
    itertools.product(
        [False, True], [False, True], ["swiglu", "relu2"], [False, True], [None, 15.0]
    )
)


@pytest.mark.parametrize("algorithm", ["adamw", "muon"])
def test_every_parameter_is_in_exactly_one_group_under_every_option(algorithm):
    for tie, qk_norm, mlp, scalars, cap in OPTIONS:
        model = dict(TINY, tie_embeddings=tie, qk_norm=qk_norm, mlp=mlp, residual_scalars=scalars,
                     logit_softcap=cap)  # fmt: skip
        lit = LitCausalLM(model, {"algorithm": algorithm})
        groups = lit.param_groups()
        grouped = [id(p) for g in groups for p in g["params"]]
        assert len(grouped) == len(set(grouped)), (model, "a parameter in two groups")
        assert set(grouped) == {id(p) for p in lit.parameters()}, (model, "one left out")
        muon = [p for g in groups if g.get("muon") for p in g["params"]]
        embedding, head = lit.model.wte.weight, lit.model.lm_head.weight
        assert all(p.dim() == 2 and p is not embedding and p is not head for p in muon)
        if algorithm == "muon":
            assert len(muon) == sum(p.dim() == 2 for p in lit.parameters()) - (1 if tie else 2)


class Rows(LitCausalLM):
    def train_dataloader(self):
        rows = [pack_row(random_docs([9, 7], seed), 16) for seed in range(9)]
        squeeze = [{k: v[0] for k, v in r.items()} for r in rows]
        return DataLoader(squeeze, batch_size=1)


@pytest.mark.filterwarnings("ignore:.*does not have many workers")
@pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no `val_dataloader`")
def test_muon_with_accumulation_clipping_a_tied_head_and_every_option_trains(tmp_path):
    """accumulate_grad_batches=3, gradient_clip_val, a tied head and all the options at once:
    3 optimizer steps, every weight finite, every weight with a gradient moved once."""
    torch.manual_seed(0)
    model = dict(TINY, tie_embeddings=True, qk_norm=True, mlp="relu2", residual_scalars=True,
                 logit_softcap=15.0, zero_init_proj=True)  # fmt: skip
    lit = Rows(model, {"algorithm": "muon", "warmup_steps": 0, "muon_momentum_warmup_steps": 2})
    before = {n: p.detach().clone() for n, p in lit.named_parameters()}
    trainer = L.Trainer(
        max_steps=3, accumulate_grad_batches=3, gradient_clip_val=0.5, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, accelerator="cpu",
    )  # fmt: skip
    trainer.fit(lit)
    assert trainer.global_step == 3
    (opt,) = trainer.optimizers
    assert opt.param_groups[0]["name"] == "hidden" and opt.param_groups[0]["muon_steps"] == 3
    assert opt.param_groups[2]["name"] == "head" and opt.param_groups[2]["params"] == []
    for n, p in lit.named_parameters():
        assert torch.isfinite(p).all(), n
        assert not torch.equal(p.detach(), before[n]), f"{n} never moved"


# --- anneal_by_time on a clock that runs out ------------------------------------------------


class FakeTrainer(SimpleNamespace):
    """What configure_optimizers reads of a Trainer (a class: the module holds a weakref)."""


class Clock(Timer):
    """Lightning's Timer with its clock set by the test (seconds elapsed of `limit`)."""

    def __init__(self, limit: float):
        super().__init__(duration={"seconds": limit})
        self.limit, self.now = limit, 0.0

    def time_elapsed(self, stage=RunningStage.TRAINING) -> float:
        return self.now

    def time_remaining(self, stage=RunningStage.TRAINING) -> float:
        return self.limit - self.now


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
@pytest.mark.parametrize(("max_steps", "warmup"), [(None, 5), (1000, 5), (1, 0), (3, 10)])
def test_a_one_second_time_limit_anneals_to_min_lr_ratio_and_never_below(
    schedule, max_steps, warmup
):
    """trainer.max_time=1 s with optim.anneal_by_time: the time can run out inside the warmup
    (then the first step after it is at min_lr_ratio), the steps after the limit stay there."""
    clock = Clock(1.0)
    lit = LitCausalLM(TINY, {"schedule": schedule, "anneal_by_time": True, "max_steps": max_steps,
                             "warmup_steps": warmup, "min_lr_ratio": 0.0})  # fmt: skip
    trainer = FakeTrainer(callbacks=[clock], estimated_stepping_batches=math.inf,
                          world_size=1, precision_plugin=None, datamodule=None)  # fmt: skip
    lit.trainer = trainer  # the module keeps a weak reference: `trainer` holds it
    configured = lit.configure_optimizers()
    optimizer, scheduler = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    peak, factors = 3e-3, []
    for step in range(40):
        clock.now = 0.1 * step  # the limit is reached at step 10
        optimizer.step()  # no gradients: nothing moves; the scheduler's order
        scheduler.step()
        factors.append(scheduler.get_last_lr()[0] / peak)
    assert all(math.isfinite(f) and 0.0 <= f <= 1.0 + 1e-12 for f in factors), factors
    after = max(warmup, 10)
    assert all(f == 0.0 for f in factors[after:]), factors  # time up, warmup done: min_lr_ratio
