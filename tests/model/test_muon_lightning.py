"""optim=muon inside LitCausalLM and a real Trainer: which weights Muon trains, its settings
from the config, DDP ranks agreeing."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from helpers.models import tiny_config
from packlm.config.model import OptimConfig
from packlm.errors import ConfigError
from packlm.model.lit_module import LitCausalLM
from packlm.model.muon import MuonAdamW

pytestmark = [pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no")]


def make(tie=False, **optim) -> LitCausalLM:
    torch.manual_seed(0)
    config = tiny_config(context_length=16, tie_embeddings=tie)
    return LitCausalLM(config, {"warmup_steps": 0, "max_steps": 100, "algorithm": "muon", **optim})


@pytest.mark.parametrize("tie", [False, True])
def test_muon_trains_the_hidden_matrices_and_adamw_the_rest(tie):
    lit = make(tie, lr=1e-3, embedding_lr_ratio=8, muon_lr=0.05, muon_weight_decay=0.01)
    opt = lit.configure_optimizers()["optimizer"]
    assert isinstance(opt, MuonAdamW)
    hidden, embedding, head, vectors = opt.param_groups
    assert [g["name"] for g in opt.param_groups] == ["hidden", "embedding", "head", "vectors"]
    names = {id(p): n for n, p in lit.model.named_parameters()}
    assert sorted(names[id(p)].split(".")[-2] for p in hidden["params"]) == sorted(
        ["qkv", "proj", "gate_up", "down"] * lit.model_config.n_layer
    )
    assert hidden["muon"] and hidden["lr"] == 0.05 and hidden["weight_decay"] == 0.01
    assert embedding["params"] == [lit.model.wte.weight] and embedding["lr"] == 8e-3
    assert head["params"] == ([] if tie else [lit.model.lm_head.weight]) and head["lr"] == 1e-3
    assert all(p.dim() == 1 for p in vectors["params"]) and vectors["weight_decay"] == 0.0
    assert not any(g["muon"] for g in (embedding, head, vectors))
    assert sum(len(g["params"]) for g in opt.param_groups) == len(list(lit.parameters()))


def test_the_newton_schulz_dtype_follows_the_config_and_is_said(monkeypatch):
    from packlm.model import lit_module

    said = []
    monkeypatch.setattr(lit_module, "rank_zero_info", said.append)
    monkeypatch.setattr(lit_module, "bf16_native", lambda device: False)
    assert make()._optimizer().ns_dtype == torch.float32  # auto, a CPU without bf16 units
    assert said == ["optim=muon: Newton-Schulz in float32 (bf16 matmuls emulated on this cpu)"]
    monkeypatch.setattr(lit_module, "bf16_native", lambda device: True)
    assert make()._optimizer().ns_dtype == torch.bfloat16  # auto: torch.optim.Muon itself
    assert make(muon_ns_dtype="float32")._optimizer().ns_dtype == torch.float32
    assert make(muon_ns_dtype="bfloat16")._optimizer()._native is not None


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("algorithm", "sgd", r"optim.algorithm='sgd': allowed \['adamw', 'muon'\]"),
        ("muon_lr", 0, r"optim.muon_lr=0: must be a positive number"),
        ("muon_lr", "fast", r"optim.muon_lr='fast': must be a number >= 0"),
        ("muon_momentum", 1.0, r"optim.muon_momentum=1.0: must be in \[0, 1\)"),
        ("muon_momentum_start", -0.1, r"optim.muon_momentum_start=-0.1: must be a number >= 0"),
        ("muon_momentum_warmup_steps", 2.5, r"optim.muon_momentum_warmup_steps=2.5: must be"),
        ("muon_ns_steps", 0, r"optim.muon_ns_steps=0: must be a positive integer"),
        ("muon_ns_steps", 10**9, r"optim.muon_ns_steps=1000000000: at most 20"),
        ("muon_ns_dtype", "fp8", r"optim.muon_ns_dtype='fp8': allowed"),
        ("muon_weight_decay", True, r"optim.muon_weight_decay=True: must be a number >= 0"),
    ],
)
def test_bad_muon_settings_name_the_key(key, value, message):
    with pytest.raises(ConfigError, match=message):
        OptimConfig.from_mapping({"algorithm": "muon", key: value})


class Ranks(LitCausalLM):
    def __init__(self, *args, out=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.out = out

    def train_dataloader(self):
        gen = torch.Generator().manual_seed(self.global_rank)
        ids = torch.randint(0, self.model_config.vocab_size, (6, 2, 16), generator=gen)
        return DataLoader([{"input_ids": x, "labels": x} for x in ids], batch_size=None)

    def on_train_end(self):
        weights = {k: v.clone() for k, v in self.model.state_dict().items()}
        torch.save(weights, f"{self.out}{self.global_rank}.pt")


@pytest.mark.slow
def test_two_ddp_ranks_end_with_the_same_weights(tmp_path):
    """Each rank orthogonalizes the same all-reduced gradient: the ranks agree to the bit."""
    torch.manual_seed(0)
    lit = Ranks(
        tiny_config(context_length=16), {"warmup_steps": 0, "algorithm": "muon"},
        out=str(tmp_path / "rank"),
    )  # fmt: skip
    fit = L.Trainer(
        accelerator="cpu", devices=2, strategy="ddp_spawn", max_steps=3, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accumulate_grad_batches=2, use_distributed_sampler=False,
    )  # fmt: skip
    fit.fit(lit)
    start = Ranks(tiny_config(context_length=16)).model.state_dict()
    r0, r1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    for k in r0:
        assert torch.equal(r0[k], r1[k]), k
    assert any(not torch.equal(r0[k], start[k]) for k in r0 if "qkv" in k)  # Muon moved them
