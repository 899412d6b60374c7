"""The chunked head (fused.linear_cross_entropy) equals the head and F.cross_entropy, rotary
turns pairs, and the precision rules: float32 attention on CPU under bf16 autocast,
trainer.precision=auto."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from packlm.config.model import ModelConfig
from packlm.config.trainer import TrainerConfig
from packlm.model import fused, masks
from packlm.model.lit_module import LitCausalLM
from packlm.model.loss import grad_norm
from packlm.model.transformer import Transformer, rotate


def angles(B: int, T: int, D: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary tables as the model's Rotary gives them: [B, 1, T, D], the halves repeated."""
    g = torch.Generator().manual_seed(1)
    theta = torch.rand(B, 1, T, D // 2, generator=g, dtype=dtype) * 6.3  # [B, 1, T, D/2]
    theta = torch.cat((theta, theta), dim=-1)
    return theta.cos(), theta.sin()


def test_rotary_turns_each_pair_keeps_its_length_and_the_opposite_angle_undoes_it():
    B, T, H, D = 2, 5, 3, 8
    cos, sin = angles(B, T, D, torch.float64)
    x = torch.randn(B, H, T, D, dtype=torch.float64)
    out = rotate(x, cos, sin)
    (x1, x2), (o1, o2) = x.chunk(2, dim=-1), out.chunk(2, dim=-1)  # pairs (i, i + D/2)
    torch.testing.assert_close(o1**2 + o2**2, x1**2 + x2**2)
    torch.testing.assert_close(o1, x1 * cos[..., : D // 2] - x2 * sin[..., : D // 2])
    torch.testing.assert_close(rotate(out, cos, -sin), x)


def test_the_attention_heads_are_float32_under_bf16_autocast_with_float32_gradients(monkeypatch):
    torch.manual_seed(0)
    model = Transformer(
        ModelConfig(vocab_size=32, context_length=8, n_layer=1, n_head=2, n_embd=16)
    )
    dtypes = []
    attend = masks.attend

    def recording_attend(q, k, v, mask):
        dtypes.append((q.dtype, k.dtype, v.dtype))
        return attend(q, k, v, mask)

    monkeypatch.setattr(masks, "attend", recording_attend)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(torch.randint(0, 32, (2, 8)))
    assert dtypes == [(torch.float32,) * 3] and logits.dtype == torch.bfloat16
    logits.float().sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())


def test_attention_runs_in_float32_on_cpu_under_16_bit_precision():
    x = torch.randn(2, 3)
    assert masks.attention_dtype(x) == torch.float32
    assert masks.attention_dtype(x.double()) == torch.float64
    assert masks.attention_dtype(x.bfloat16()) == torch.float32  # bf16-true
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert masks.attention_dtype(x) == torch.float32


@pytest.mark.parametrize(
    ("cuda", "bf16", "accelerator", "expected"),
    [(False, False, "auto", "32-true"), (False, False, "cpu", "32-true"),
     (True, True, "auto", "bf16-mixed"), (True, True, "gpu", "bf16-mixed"),
     (True, True, "cpu", "32-true"), (True, False, "auto", "32-true")],
)  # fmt: skip
def test_precision_auto_is_bf16_mixed_on_cuda_with_bf16_else_32_true(
    monkeypatch, cuda, bf16, accelerator, expected
):
    """A fixed rule: a CPU trains in float32 whatever it is, with nothing measured at start-up
    (a gain once left in the environment for DDP ranks decides nothing either)."""
    monkeypatch.setenv("PACKLM_CPU_BF16_GAIN", "3.9")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    config = TrainerConfig(accelerator=accelerator).validate()
    assert config.precision == "auto"
    assert config.trainer_kwargs().get("precision", "32-true") == expected
    assert TrainerConfig(precision="bf16-mixed").trainer_kwargs()["precision"] == "bf16-mixed"
    assert TrainerConfig(precision="64-true").trainer_kwargs()["precision"] == "64-true"


@pytest.mark.parametrize(("precision", "fused_adamw"), [("32-true", True), ("bf16-mixed", True)])
def test_adamw_is_fused_on_cpu_and_bf16_mixed_clips_it(precision, fused_adamw):
    import lightning as L

    torch.manual_seed(0)
    lit = LitCausalLM(
        dict(vocab_size=32, context_length=8, n_layer=1, n_head=2, n_embd=16), {"max_steps": 10}
    )
    trainer = L.Trainer(accelerator="cpu", precision=precision, logger=False, max_steps=1,
                        gradient_clip_val=1e-3)  # fmt: skip
    lit.trainer = trainer
    optimizer = lit.configure_optimizers()["optimizer"]
    assert optimizer.defaults["fused"] is fused_adamw
    for p in lit.parameters():
        p.grad = torch.randn_like(p)
    copies = [torch.nn.Parameter(p.detach().clone()) for p in lit.parameters()]
    for c, p in zip(copies, lit.parameters(), strict=True):
        c.grad = p.grad.clone()
    torch.nn.utils.clip_grad_norm_(copies, 1e-3)  # what Lightning's clipping does
    expected = [c.grad for c in copies]
    lit.last_grad_norm = grad_norm([p.grad for p in lit.parameters()])  # as the step takes it
    # Lightning's own clipping refuses a fused optimizer under bf16-mixed; packlm's hook clips
    lit.configure_gradient_clipping(optimizer, 1e-3, trainer.gradient_clip_algorithm)
    assert all(torch.equal(p.grad, e) for p, e in zip(lit.parameters(), expected, strict=True))


def test_fp16_mixed_keeps_adamw_unfused_for_its_grad_scaler():
    import lightning as L

    lit = LitCausalLM(
        dict(vocab_size=32, context_length=8, n_layer=1, n_head=2, n_embd=16), {"max_steps": 10}
    )
    from lightning.pytorch.plugins.precision import MixedPrecision

    fp16 = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    lit.trainer = L.Trainer(accelerator="cpu", plugins=[fp16], logger=False, max_steps=1)
    assert lit.trainer.precision_plugin.scaler is not None
    assert lit.configure_optimizers()["optimizer"].defaults["fused"] is False


# --- the output head and the cross-entropy in row chunks -----------------------------------


def head_problem(N: int, C: int, V: int, dtype: torch.dtype, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, C, generator=g, dtype=dtype).requires_grad_()
    weight = torch.randn(V, C, generator=g, dtype=dtype).requires_grad_()
    labels = torch.randint(0, V, (N,), generator=g)
    labels[::5] = -100  # rows without a target
    weights = torch.rand(N, generator=g, dtype=dtype)
    return hidden, weight, labels, weights


def composite_ce(hidden, weight, labels, weights):
    ce = F.cross_entropy(hidden @ weight.t(), labels, reduction="none")  # 0 where -100
    return (ce if weights is None else ce * weights).sum(), ce


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("chunk_rows", [64, 1000])  # several chunks (a partial last one); one
def test_linear_cross_entropy_equals_the_head_and_f_cross_entropy(
    monkeypatch, weighted, chunk_rows
):
    N, C, V = 150, 8, 33
    monkeypatch.setattr(fused, "CE_CHUNK_ELEMENTS", chunk_rows * V)
    hidden, weight, labels, weights = head_problem(N, C, V, torch.float64)
    weights = weights if weighted else None
    objective, ce = fused.linear_cross_entropy(hidden, weight, labels, weights)
    want_objective, want_ce = composite_ce(hidden, weight, labels, weights)
    torch.testing.assert_close(ce, want_ce.detach(), rtol=1e-12, atol=1e-12)
    assert not ce.requires_grad and bool((ce[labels == -100] == 0).all())
    got = torch.autograd.grad(objective * 2.5, (hidden, weight))  # an incoming gradient != 1
    want = torch.autograd.grad(want_objective * 2.5, (hidden, weight))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert got[0][labels == -100].abs().max() == 0  # a row without a target gets no gradient


def test_linear_cross_entropy_passes_gradcheck():
    hidden, weight, labels, weights = head_problem(70, 4, 9, torch.float64, seed=1)

    def objective(h, w):
        return fused.linear_cross_entropy(h, w, labels, weights)[0]

    assert torch.autograd.gradcheck(objective, (hidden, weight))


def test_linear_cross_entropy_under_bf16_autocast_matches_f_linear_and_cross_entropy():
    hidden, weight, labels, _ = head_problem(200, 32, 100, torch.float32, seed=2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        objective, ce = fused.linear_cross_entropy(hidden, weight, labels)
        logits = F.linear(hidden, weight)  # bf16, as the model's head under autocast
    assert logits.dtype == torch.bfloat16 and ce.dtype == torch.float32
    want = F.cross_entropy(logits.float(), labels, reduction="none")
    torch.testing.assert_close(ce, want.detach(), rtol=0, atol=1e-5)  # the same bf16 logits
    got = torch.autograd.grad(objective, (hidden, weight))
    wanted = torch.autograd.grad(want.sum(), (hidden, weight))
    for a, b in zip(got, wanted, strict=True):
        assert a.dtype == torch.float32
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)  # bf16 matmuls, summed apart


def test_linear_cross_entropy_without_grad_gives_the_same_values():
    hidden, weight, labels, weights = head_problem(90, 8, 17, torch.float32, seed=3)
    with_grad = fused.linear_cross_entropy(hidden, weight, labels, weights)
    with torch.no_grad():
        without = fused.linear_cross_entropy(hidden, weight, labels, weights)
    assert not without[0].requires_grad
    for a, b in zip(with_grad, without, strict=True):
        assert torch.equal(a.detach(), b)


@pytest.mark.parametrize("chunked_from", [0, 2**62])  # the chunked head / logits + CE
@pytest.mark.parametrize("tied", [False, True])
def test_the_training_loss_equals_logits_and_cross_entropy(monkeypatch, tied, chunked_from):
    """LitCausalLM's eager CPU loss, either path, against the model's logits + F.cross_entropy."""
    monkeypatch.setattr(fused, "CE_CHUNKED_FROM", chunked_from)
    torch.manual_seed(0)
    lit = LitCausalLM(
        dict(vocab_size=40, context_length=16, n_layer=1, n_head=2, n_embd=16, tie_embeddings=tied)
    ).double()
    B, T = 3, 16
    labels = torch.randint(0, 40, (B, T))
    labels[:, -2:] = -100
    batch = {
        "input_ids": torch.randint(0, 40, (B, T)),
        "labels": labels,
        "segment_ids": torch.tensor([0] * 9 + [1] * 7).expand(B, T),
    }
    objective, ce = lit._cross_entropy(batch)
    logits = lit(batch["input_ids"], batch["segment_ids"])  # [B, T, V]
    want = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
    torch.testing.assert_close(ce, want.view(B, T).detach(), rtol=1e-12, atol=1e-12)
    params = [p for p in lit.parameters() if p.requires_grad]
    got = torch.autograd.grad(objective, params)
    for a, b in zip(got, torch.autograd.grad(want.sum(), params), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("weighted", [False, True])
def test_the_chunked_head_with_a_softcap_is_tanh_logits_and_cross_entropy(weighted, monkeypatch):
    """model.logit_softcap through the chunked head: the CE, its sum and both gradients are
    those of cap * tanh(h w^T / cap) and F.cross_entropy (float64), over several chunks."""
    monkeypatch.setattr(fused, "CE_CHUNK_ELEMENTS", 1)  # 64 rows a chunk: three chunks
    g = torch.Generator().manual_seed(0)
    N, C, V, cap = 150, 8, 24, 2.0
    h = torch.randn(N, C, generator=g, dtype=torch.float64, requires_grad=True)
    w = (3 * torch.randn(V, C, generator=g, dtype=torch.float64)).requires_grad_()
    labels = torch.randint(0, V, (N,), generator=g)
    labels[::7] = -100
    weights = torch.rand(N, generator=g, dtype=torch.float64) if weighted else None
    objective, ce = fused.linear_cross_entropy(h, w, labels, weights, -100, softcap=cap)
    objective.backward()
    got = h.grad.clone(), w.grad.clone()
    h.grad = w.grad = None
    logits = cap * torch.tanh(h @ w.T / cap)  # [N, V]
    assert (h @ w.T).abs().max() > 3 * cap  # the cap bites
    ref_ce = F.cross_entropy(logits, labels, reduction="none", ignore_index=-100)
    ref = (ref_ce if weights is None else ref_ce * weights).sum()
    ref.backward()
    torch.testing.assert_close(ce, ref_ce.detach())
    torch.testing.assert_close(objective, ref.detach())
    torch.testing.assert_close(got[0], h.grad)
    torch.testing.assert_close(got[1], w.grad)


def test_the_training_loss_takes_the_softcap_on_both_head_paths(monkeypatch):
    from packlm.model.loss import head_cross_entropy

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=64, context_length=8, n_layer=1, n_head=2, n_embd=16)
    model = Transformer(ModelConfig(**{**vars(config), "logit_softcap": 0.3})).double()
    ids = torch.randint(0, 64, (2, 8))
    inputs = (ids, None, None)
    got = {}
    for path, threshold in (("logits", 2**62), ("chunked", 0)):
        monkeypatch.setattr(fused, "CE_CHUNKED_FROM", threshold)
        objective, ce = head_cross_entropy(model, model, inputs, ids)
        got[path] = objective.item(), ce.detach()
    assert got["logits"][0] == pytest.approx(got["chunked"][0], rel=1e-12)
    torch.testing.assert_close(got["logits"][1], got["chunked"][1])
    # logits within (-0.3, 0.3): no target can cost more than ln V + 2 * 0.3
    assert got["logits"][1].max() < torch.log(torch.tensor(64.0)).item() + 0.6
