"""No NaN anywhere: all-padding rows, zero-target batches, bf16/fp16 autocast on the CPU, and a
`trainer.precision=bf16-mixed` training run.

float32 all-PAD rows and zero-target batches are proven in
tests/model/test_transformer.py::test_all_pad_rows_and_zero_targets_are_finite and
tests/model/test_lit_module.py::test_step_without_targets_leaves_everything_unchanged;
here the same batches go through autocast and a whole Trainer.
"""

from __future__ import annotations

import lightning as L
import pytest
import torch

from packlm.config.model import ModelConfig
from packlm.model.lit_module import LitCausalLM
from packlm.train import train

V, T, PAD = 61, 12, 60


def batch(zero_targets: bool = False) -> dict[str, torch.Tensor]:
    """Three rows: two documents then PAD; one document filling the row; all PAD."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, PAD, (3, T), generator=g)
    seg = torch.tensor([[0] * 5 + [1] * 4 + [-1] * 3, [0] * T, [-1] * T], dtype=torch.int32)
    ids[seg < 0] = PAD
    pos = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 0, 1, 2], list(range(T)), list(range(T))])
    labels = torch.full((3, T), -100)
    same = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] >= 0)
    labels[:, :-1] = torch.where(same, ids[:, 1:], torch.tensor(-100))
    if zero_targets:
        labels[:] = -100
    return {"input_ids": ids, "labels": labels, "segment_ids": seg, "position_ids": pos}


def lit() -> LitCausalLM:
    torch.manual_seed(0)
    return LitCausalLM(ModelConfig(vocab_size=V, context_length=T, n_layer=2, n_head=2, n_embd=32))


def autocast_dtypes() -> list:
    out = [torch.bfloat16]
    try:
        with torch.autocast("cpu", dtype=torch.float16):
            torch.ones(2, 2) @ torch.ones(2, 2)
        out.append(torch.float16)
    except (RuntimeError, AssertionError):  # pragma: no cover - depends on the torch build
        pass
    return out


@pytest.mark.parametrize("dtype", autocast_dtypes(), ids=str)
@pytest.mark.parametrize("zero_targets", [False, True], ids=["targets", "zero-targets"])
def test_autocast_forward_and_backward_are_finite(dtype, zero_targets):
    module = lit()
    b = batch(zero_targets)
    with torch.autocast("cpu", dtype=dtype):
        logits = module(b["input_ids"], b["segment_ids"], b["position_ids"])
        sum_ce, ce = module._sum_ce(b)  # ce: float32 [B, T], 0 where not supervised
    assert logits.dtype == dtype  # autocast really ran in the low precision
    assert torch.isfinite(logits).all() and torch.isfinite(ce).all()
    n = int((b["labels"] != -100).sum())
    assert n == (0 if zero_targets else 4 + 3 + 11)
    loss = sum_ce / max(n, 1)
    assert torch.isfinite(loss) and (loss == 0) == zero_targets
    loss.backward()
    for name, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        if zero_targets:
            assert not p.grad.any(), name


def test_pad_rows_under_autocast_match_float32_real_positions():
    """The all-PAD row changes nothing elsewhere, and low precision stays near float32."""
    module = lit()
    b = batch()
    ref = module(b["input_ids"], b["segment_ids"], b["position_ids"])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = module(b["input_ids"], b["segment_ids"], b["position_ids"]).float()
    real = b["segment_ids"] >= 0
    torch.testing.assert_close(low[real], ref[real], atol=0.1, rtol=0.05)
    alone = module(b["input_ids"][:2], b["segment_ids"][:2], b["position_ids"][:2])
    torch.testing.assert_close(alone, ref[:2], atol=1e-5, rtol=1e-5)


class Losses(L.Callback):
    def __init__(self):
        self.losses: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, *args):
        self.losses.append(pl_module.last_loss)


@pytest.mark.filterwarnings(
    "ignore:You passed `Trainer\\(accelerator=.cpu., precision=.16-mixed.\\)`"
)  # falls back to bf16
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_a_mixed_precision_training_run_has_finite_losses(compose_tiny, tmp_path, precision):
    """bf16-mixed, and 16-mixed (float16 autocast with a gradient scaler, which Lightning 2.6
    also runs on the CPU)."""
    losses = Losses()
    metrics = train(
        compose_tiny(f"trainer.precision={precision}", "train.validate_at_end=true"),
        run_dir=tmp_path,
        callbacks=[losses],
    )
    assert len(losses.losses) == 8 and all(torch.isfinite(torch.tensor(losses.losses)))
    assert losses.losses[-1] < losses.losses[0]  # it learns
    assert torch.isfinite(torch.tensor(metrics["val/loss"])) and metrics["val/bpb"] > 0
    state = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.isfinite(v).all() for v in state.values())
