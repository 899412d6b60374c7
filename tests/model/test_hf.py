"""Hugging Face causal LMs on packlm batches (examples/hf_causal_lm.py): a packed row gives
each document's logits alone, through transformers' own packed-sequence detection from
position_ids (SDPA and eager) and through packlm's 4D block mask; the exact step loss of
`ExactStepLoss` holds for them as for packlm's own module."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

pytest.importorskip("transformers")

from helpers.models import V, cat_rows, pack_row, random_docs  # noqa: E402
from packlm.batch import IGNORE_INDEX, make_batch  # noqa: E402
from packlm.model.hf import hf_inputs  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated")
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_causal_lm.py"
T = 16
MANY = cat_rows(pack_row(random_docs([7, 8], 1), T), pack_row(random_docs([15], 2), T))
FEW = cat_rows(pack_row(random_docs([3], 3), T), pack_row([], T))  # 2 targets, one PAD row


def example():
    spec = importlib.util.spec_from_file_location("hf_causal_lm", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model(arch: str, attention: str = "sdpa", seed: int = 0):
    torch.manual_seed(seed)
    return example().tiny_model(arch, V, 64, attention).eval()


@pytest.mark.parametrize("mask", ["position_ids", "4d"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_packed_row_gives_each_document_its_logits_alone(arch, attention, mask):
    """Invariant 1 for Hugging Face models; without isolation the error is ~0.1-0.4."""
    net = model(arch, attention)
    tokens = np.random.default_rng(0).integers(0, V - 1, (2, T + 1))
    segments = np.array([[0] * 5 + [1] * 7 + [2] * 5, [0] * 10 + [1] * 4 + [-1] * 3], np.int32)
    batch = {k: torch.from_numpy(v) for k, v in make_batch(tokens, segments, "document").items()}
    with torch.no_grad():
        packed = net(**hf_inputs(batch, mask)).logits  # [2, T, V]
        for r in range(2):
            seg = batch["segment_ids"][r]
            for s in seg[seg >= 0].unique():
                where = torch.nonzero(seg == s).flatten()
                alone = net(batch["input_ids"][r : r + 1, where], use_cache=False).logits[0]
                torch.testing.assert_close(packed[r, where], alone, atol=1e-5, rtol=0)


def test_a_cache_turns_transformers_packing_detection_off():
    """Why hf_inputs passes use_cache=False: with the configs' default cache, documents of a
    row attend to each other (transformers reads packing from position_ids only without)."""
    net = model("llama")
    batch = MANY
    with torch.no_grad():
        isolated = net(**hf_inputs(batch)).logits
        cached = net(**{**hf_inputs(batch), "use_cache": True}).logits
    second = batch["segment_ids"][0] == 1
    assert (isolated[0, second] - cached[0, second]).abs().max() > 1e-3


class Probe(L.Callback):
    """The gradients the optimizer used (the mixin's rescale runs after callbacks'
    on_before_optimizer_step, so they are read after the batch; AdamW leaves them)."""

    def on_train_batch_end(self, trainer, lit, *args):
        self.grads = {n: p.grad.clone() for n, p in lit.model.named_parameters()}
        self.loss = lit.last_loss


def fit_step(arch: str, mask: str, batches, accumulate: int) -> Probe:
    lit = example().HFLightning(model(arch).train(), mask)
    probe = Probe()
    trainer = L.Trainer(
        max_steps=1, accumulate_grad_batches=accumulate, accelerator="cpu", devices=1,
        precision="64-true", logger=False, enable_checkpointing=False, callbacks=[probe],
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(lit, DataLoader(list(batches), batch_size=None))
    return probe


def reference(arch: str, mask: str, *batches):
    """Gradient of (sum of CE over all targets of all batches) / (their number), by hand."""
    net = model(arch).train().double()
    n = sum(int((b["labels"] != IGNORE_INDEX).sum()) for b in batches)
    total = 0
    for b in batches:
        logits = net(**hf_inputs(b, mask, torch.float64)).logits
        total = total + F.cross_entropy(
            logits.flatten(0, 1), b["labels"].flatten(), reduction="sum"
        )
    (total / n).backward()
    return {k: p.grad for k, p in net.named_parameters()}, (total / n).item()


@pytest.mark.parametrize(("arch", "mask"), [("llama", "position_ids"), ("gpt2", "4d")])
def test_accumulation_equals_one_big_batch_for_a_hugging_face_model(arch, mask):
    expected, loss = reference(arch, mask, MANY, FEW)
    accumulated = fit_step(arch, mask, copy.deepcopy((MANY, FEW)), 2)
    big = fit_step(arch, mask, (cat_rows(MANY, FEW),), 1)
    for probe in (accumulated, big):
        assert probe.loss == pytest.approx(loss, rel=1e-12)
    for name, g in expected.items():
        torch.testing.assert_close(accumulated.grads[name], big.grads[name], atol=1e-12, rtol=1e-10)
        # the hand-made reference: ~1e-8 relative (Llama's rotary angles are float32)
        torch.testing.assert_close(accumulated.grads[name], g, atol=1e-7, rtol=1e-6, msg=name)
    # the test can tell: a mean per micro-batch would weigh FEW's 2 targets like MANY's 27
    many, few = reference(arch, mask, MANY)[0], reference(arch, mask, FEW)[0]
    key = next(iter(expected))
    assert not torch.allclose((many[key] + few[key]) / 2, expected[key], atol=1e-4)


class RankRecorder(L.Callback):
    """Rank 0 saves the gradients the step used and its loss."""

    def __init__(self, out: str):
        self.out = out

    def on_train_batch_end(self, trainer, lit, *args):
        if trainer.global_rank == 0:
            grads = {n: p.grad.clone() for n, p in lit.model.named_parameters()}
            torch.save({"grads": grads, "loss": lit.last_loss}, self.out)


class RankShards(L.LightningDataModule):
    def train_dataloader(self):
        shards = [(MANY, FEW), (FEW, FEW)]  # 29 and 4 targets: ranks weigh unequally
        return DataLoader(list(shards[self.trainer.global_rank]), batch_size=None)


@pytest.mark.slow
def test_two_ddp_ranks_equal_one_process_for_a_hugging_face_model(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))  # spawned ranks unpickle the module
    import hf_causal_lm

    out = tmp_path / "rank0.pt"
    lit = hf_causal_lm.HFLightning(model("llama").train())
    trainer = L.Trainer(
        max_steps=1, accumulate_grad_batches=2, accelerator="cpu", devices=2,
        strategy="ddp_spawn", precision="64-true", logger=False, enable_checkpointing=False,
        callbacks=[RankRecorder(str(out))], use_distributed_sampler=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(lit, datamodule=RankShards())
    got = torch.load(out)
    one = fit_step("llama", "position_ids", (cat_rows(MANY, FEW, FEW, FEW),), 1)
    assert got["loss"] == pytest.approx(one.loss, rel=1e-12)
    for name, g in one.grads.items():
        torch.testing.assert_close(got["grads"][name], g, atol=1e-12, rtol=1e-9, msg=name)
