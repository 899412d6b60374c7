"""Muon (packlm.model.muon) against its references: the plain Newton-Schulz iteration in
float64, torch.optim.Muon's own step, torch's AdamW, and a state_dict round trip."""

from __future__ import annotations

import copy
import io

import pytest
import torch

from packlm.model.muon import (
    NS_COEFFICIENTS,
    MuonAdamW,
    lr_scale,
    momentum_at,
    muon_update,
    newton_schulz,
)

SHAPES = [(48, 16), (16, 48), (32, 32), (96, 32)]


def reference_newton_schulz(g: torch.Tensor, steps: int) -> torch.Tensor:
    """Keller Jordan's zeropower_via_newtonschulz5, written plainly, in float64."""
    a, b, c = NS_COEFFICIENTS
    x = g.double()
    if g.size(0) > g.size(1):
        x = x.T
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        A = x @ x.T
        B = b * A + c * A @ A
        x = a * x + B @ x
    return x.T if g.size(0) > g.size(1) else x


@pytest.mark.parametrize("shape", SHAPES)
def test_float32_iteration_is_the_reference_and_nearly_orthogonal(shape):
    g = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    before = g.clone()
    out = newton_schulz(g, 5)
    assert out.dtype == torch.float32 and out.shape == g.shape
    assert torch.equal(g, before)  # the gradient is not written
    torch.testing.assert_close(out.double(), reference_newton_schulz(g, 5), atol=2e-5, rtol=1e-4)
    # the quintic's fixed point is not 1: singular values land in about [0.7, 1.2]
    s = torch.linalg.svdvals(out.double())
    assert s.min() > 0.6 and s.max() < 1.25, s
    # plain SVD's U V^T is what it approximates: close in direction
    u, _, vh = torch.linalg.svd(g.double(), full_matrices=False)
    cos = (out.double() * (u @ vh)).sum() / (out.double().norm() * (u @ vh).norm())
    assert cos > 0.98


def test_more_steps_do_not_blow_up_and_zero_stays_zero():
    g = torch.randn(24, 40, generator=torch.Generator().manual_seed(1))
    s = torch.linalg.svdvals(newton_schulz(g, 15).double())
    assert s.min() > 0.6 and s.max() < 1.25
    assert torch.equal(newton_schulz(torch.zeros(8, 4), 5), torch.zeros(8, 4))


def _grads(params, seed):
    gen = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)


@pytest.mark.parametrize("nesterov", [True, False])
def test_bfloat16_update_is_torch_muons_step_bit_for_bit(nesterov):
    gen = torch.Generator().manual_seed(2)
    ours = [torch.randn(s, generator=gen) for s in SHAPES]
    theirs = [p.clone().requires_grad_() for p in ours]
    opt = torch.optim.Muon(theirs, lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov)
    buffers = [torch.zeros_like(p) for p in ours]
    for step in range(3):
        _grads(ours, step)
        _grads(theirs, step)
        muon_update(
            ours, buffers, lr=0.02, weight_decay=0.1, momentum=0.9, nesterov=nesterov,
            ns_steps=5, dtype=torch.bfloat16,
        )  # fmt: skip
        opt.step()
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b.detach())


def test_float32_update_agrees_with_torch_muon_to_bfloat16_precision():
    gen = torch.Generator().manual_seed(3)
    ours = [torch.randn(s, generator=gen) for s in SHAPES]
    theirs = [p.clone().requires_grad_() for p in ours]
    start = [p.clone() for p in ours]
    opt = torch.optim.Muon(theirs, lr=0.02, weight_decay=0.0)
    _grads(ours, 0)
    _grads(theirs, 0)
    muon_update(
        ours, [torch.zeros_like(p) for p in ours], lr=0.02, weight_decay=0.0, momentum=0.95,
        nesterov=True, ns_steps=5, dtype=torch.float32,
    )  # fmt: skip
    opt.step()
    for a, b, p0 in zip(ours, theirs, start, strict=True):
        step_a, step_b = a - p0, b.detach() - p0
        assert (step_a - step_b).norm() < 0.02 * step_b.norm()  # bf16's 8 bits of mantissa
        assert step_a.norm() > 0  # it moved
        # the RMS of an orthogonal [A, B] update is 1/sqrt(max(A, B)), times lr and the scale
        rms = 0.02 * lr_scale(p0.shape) / max(p0.shape) ** 0.5
        assert 0.6 * rms < step_a.pow(2).mean().sqrt() < 1.25 * rms


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.ModuleDict(
        {
            "emb": torch.nn.Embedding(20, 16),
            "hidden": torch.nn.Linear(16, 48, bias=False),
            "out": torch.nn.Linear(48, 20),  # a bias: a vector
        }
    )


def _groups(m):
    return [
        {"params": [m["hidden"].weight], "lr": 0.02, "weight_decay": 0.0, "muon": True},
        {"params": [m["emb"].weight, m["out"].weight], "lr": 3e-3, "weight_decay": 0.1},
        {"params": [m["out"].bias], "lr": 3e-3, "weight_decay": 0.0},
    ]


def _train(m, opt, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        ids = torch.randint(0, 20, (4, 8), generator=gen)
        loss = torch.nn.functional.cross_entropy(
            m["out"](m["hidden"](m["emb"](ids))).flatten(0, 1), ids.flatten()
        )
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("ns_dtype", [torch.float32, torch.bfloat16])
def test_adamw_groups_step_as_torch_adamw_and_muon_groups_as_muon(ns_dtype):
    m, ref = _model(), _model()
    opt = MuonAdamW(
        _groups(m), betas=(0.9, 0.99), eps=1e-8, momentum_warmup_steps=0, ns_dtype=ns_dtype
    )
    adamw = torch.optim.AdamW(_groups(ref)[1:], betas=(0.9, 0.99), eps=1e-8)
    buf = torch.zeros_like(ref["hidden"].weight)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        ids = torch.randint(0, 20, (4, 8), generator=gen)
        for model in (m, ref):
            out = model["out"](model["hidden"](model["emb"](ids)))
            model.zero_grad()
            torch.nn.functional.cross_entropy(out.flatten(0, 1), ids.flatten()).backward()
        opt.step()
        adamw.step()
        muon_update(
            [ref["hidden"].weight], [buf], lr=0.02, weight_decay=0.0, momentum=0.95,
            nesterov=True, ns_steps=5, dtype=ns_dtype,
        )  # fmt: skip
    for name, p in m.named_parameters():
        assert torch.equal(p, dict(ref.named_parameters())[name]), name


def test_momentum_warms_up_and_the_count_is_in_the_state_dict():
    m = _model()
    opt = MuonAdamW(_groups(m), betas=(0.9, 0.99), eps=1e-8, momentum_start=0.85, momentum=0.95,
                    momentum_warmup_steps=4)  # fmt: skip
    seen = []
    for _ in range(6):
        _train(m, opt, 1)
        seen.append(opt.param_groups[0]["momentum"])
    assert seen == pytest.approx([0.85, 0.875, 0.9, 0.925, 0.95, 0.95])
    assert opt.state_dict()["param_groups"][0]["muon_steps"] == 6
    assert momentum_at(0, 0.85, 0.95, 0) == 0.95


@pytest.mark.parametrize("ns_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("stop", [1, 3, 5])
def test_a_state_dict_round_trip_resumes_bit_identically(ns_dtype, stop):
    def make(model):
        return MuonAdamW(_groups(model), betas=(0.9, 0.99), eps=1e-8, fused=True,
                         momentum_warmup_steps=4, ns_dtype=ns_dtype)  # fmt: skip

    straight = _model()
    _train(straight, make(straight), 8)

    first = _model()
    opt = make(first)
    _train(first, opt, stop)
    saved = io.BytesIO()
    torch.save({"model": first.state_dict(), "optim": opt.state_dict()}, saved)
    saved.seek(0)
    loaded = torch.load(saved, weights_only=True)

    resumed = _model(seed=99)  # other weights, overwritten by the load
    resumed.load_state_dict(loaded["model"])
    opt2 = make(resumed)
    opt2.load_state_dict(copy.deepcopy(loaded["optim"]))
    # the data stream continues where it stopped: replay the same generator
    gen_steps = 8 - stop
    gen = torch.Generator().manual_seed(0)
    for _ in range(stop):
        torch.randint(0, 20, (4, 8), generator=gen)
    for _ in range(gen_steps):
        ids = torch.randint(0, 20, (4, 8), generator=gen)
        out = resumed["out"](resumed["hidden"](resumed["emb"](ids)))
        opt2.zero_grad()
        torch.nn.functional.cross_entropy(out.flatten(0, 1), ids.flatten()).backward()
        opt2.step()
    for name, p in resumed.named_parameters():
        assert torch.equal(p, dict(straight.named_parameters())[name]), name
    assert opt2.param_groups[0]["muon_steps"] == 8
    # the inner optimizers use the loaded groups (a later lr change reaches them)
    assert opt2._adamw.param_groups[0] is opt2.param_groups[1]
    assert opt2._adamw.state is opt2.state


def test_muon_refuses_vectors():
    m = _model()
    groups = _groups(m)
    groups[0]["params"] = [m["out"].bias]
    with pytest.raises(ValueError, match=r"2-D matrices only, got shapes \[\(20,\)\]"):
        MuonAdamW(groups, betas=(0.9, 0.99), eps=1e-8)
