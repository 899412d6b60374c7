"""LitCausalLM inside a real Trainer: loss weighting, empty steps, counts, bpb, resume."""

from __future__ import annotations

import copy
import math
from functools import partial
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Timer
from torch.utils.data import DataLoader

from helpers.lightning_doubles import Capture
from helpers.models import PAD, V, cat_rows, pack_row, random_docs, tiny_config
from packlm.batch import with_counts
from packlm.callbacks import StepMetrics
from packlm.data.epoch.collate import mark_stream
from packlm.model.lit_module import LitCausalLM
from packlm.model.loss import StepTotals, token_counts
from packlm.model.schedule import lr_factor, time_limit
from packlm.model.transformer import Transformer

pytestmark = [
    pytest.mark.filterwarnings("ignore:You defined a `validation_step` but have no"),
    pytest.mark.filterwarnings("ignore:.*LeafSpec.*is deprecated"),
    pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`"),
]

T = 16
# micro-batches with very different numbers of supervised targets
MANY = cat_rows(
    pack_row(random_docs([7, 8], 1), T), pack_row(random_docs([15], 2), T)
)  # 27 targets
FEW = cat_rows(pack_row(random_docs([3], 3), T), pack_row([], T))  # 2 targets, one all-PAD row
NONE = copy.deepcopy(MANY)
NONE["labels"][:] = -100


class Probe(LitCausalLM):
    """Keeps the gradients the optimizer is about to use, and the logged step losses."""

    def on_before_optimizer_step(self, optimizer):
        super().on_before_optimizer_step(optimizer)
        self.step_grads = {
            n: None if p.grad is None else p.grad.clone() for n, p in self.named_parameters()
        }
        self.step_weights = copy.deepcopy(self.model.state_dict())  # before this step's update
        self.losses = getattr(self, "losses", []) + [float(self.last_loss)]

    counts_on_cpu = False  # the `count_path` fixture's choice

    def on_before_batch_transfer(self, batch, dataloader_idx):
        batch = super().on_before_batch_transfer(batch, dataloader_idx)
        return with_counts(batch) if self.counts_on_cpu else batch


def make(cls=Probe, seed=0, **optim) -> LitCausalLM:
    torch.manual_seed(seed)
    return cls(tiny_config(context_length=T), {"warmup_steps": 0, **optim})


def trainer(**overrides) -> L.Trainer:
    settings = dict(
        accelerator="cpu", devices=1, precision="64-true", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    )  # fmt: skip
    return L.Trainer(**{**settings, **overrides})


def loader(*batches) -> DataLoader:
    return DataLoader(list(batches), batch_size=None)


def sum_ce(model, batch) -> torch.Tensor:
    logits = model(batch["input_ids"], batch["segment_ids"], batch["position_ids"])
    return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), reduction="sum")


def reference_grads(*batches) -> tuple[dict[str, torch.Tensor], float]:
    """Gradient of (sum of CE over all targets of all batches) / (number of targets), by hand."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(context_length=T)).double()
    n = sum(int((b["labels"] != -100).sum()) for b in batches)
    loss = sum(sum_ce(model, b) for b in batches) / n
    loss.backward()
    return {f"model.{k}": p.grad for k, p in model.named_parameters()}, loss.item()


def assert_grads_equal(got: dict, expected: dict) -> None:
    assert got.keys() == expected.keys()
    for name, g in expected.items():
        torch.testing.assert_close(got[name], g, atol=1e-10, rtol=1e-8, msg=name)


@pytest.fixture(params=["device counts", "cpu counts"])
def count_path(request, monkeypatch):
    """Run a test with the step's counts taken on the device (a batch without `counts`, as a
    plain DataLoader gives it) and from the batch on the CPU (`with_counts`, as packlm's
    DataModule adds them: then the step's totals are never read back from the device)."""
    if request.param == "cpu counts":
        monkeypatch.setattr(Probe, "counts_on_cpu", True)

        def read_back(totals):
            raise AssertionError("the step read its totals back from the device")

        monkeypatch.setattr(StepTotals, "from_tensor", staticmethod(read_back))
    return request.param


@pytest.fixture(params=["logits", "chunked"])
def head_path(request, monkeypatch):
    """Run a test through both loss paths of LitCausalLM: logits + F.cross_entropy, and the
    chunked head (fused.linear_cross_entropy, which the step takes for large logits)."""
    from packlm.model import fused

    monkeypatch.setattr(fused, "CE_CHUNKED_FROM", 0 if request.param == "chunked" else 2**62)
    return request.param


def test_accumulation_equals_one_big_batch(head_path, count_path):
    expected, expected_loss = reference_grads(MANY, FEW)

    accumulated = make()
    trainer(max_steps=1, accumulate_grad_batches=2).fit(accumulated, loader(MANY, FEW))
    assert_grads_equal(accumulated.step_grads, expected)
    assert accumulated.losses == [pytest.approx(expected_loss, rel=1e-12)]

    big = make()
    trainer(max_steps=1).fit(big, loader(cat_rows(MANY, FEW)))
    assert_grads_equal(big.step_grads, expected)

    # the test can tell: averaging the two micro-batch means would weigh FEW's 2 targets like 27
    naive, _ = reference_grads(MANY)
    few, _ = reference_grads(FEW)
    key = "model.wte.weight"
    assert not torch.allclose((naive[key] + few[key]) / 2, expected[key], atol=1e-6)


class HalfCounted(Probe):
    """Counts from the CPU for every other micro-batch only (a DataModule that adds them to
    some batches): a cycle mixes both kinds."""

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self.transfers = getattr(self, "transfers", 0) + 1
        return with_counts(batch) if self.transfers % 2 else batch


def test_a_cycle_mixing_counted_and_uncounted_micro_batches_is_exact(head_path):
    expected, expected_loss = reference_grads(MANY, FEW)
    mixed = make(HalfCounted)
    trainer(max_steps=1, accumulate_grad_batches=2).fit(mixed, loader(MANY, FEW))
    assert mixed.transfers == 2
    assert_grads_equal(mixed.step_grads, expected)
    assert mixed.losses == [pytest.approx(expected_loss, rel=1e-12)]


def test_short_last_cycle_of_an_epoch_is_exact(head_path, count_path):
    """3 micro-batches with accumulate_grad_batches=2: the second step has one micro-batch."""
    lit = make()
    trainer(max_steps=2, accumulate_grad_batches=2).fit(lit, loader(MANY, MANY, FEW))
    model = Transformer(tiny_config(context_length=T)).double()
    model.load_state_dict(lit.step_weights)  # weights after step 1
    (sum_ce(model, FEW) / 2).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(lit.step_grads[f"model.{name}"], p.grad, atol=1e-10, rtol=1e-8)


def test_step_without_targets_leaves_everything_unchanged(head_path, count_path):
    snapshots = []

    class Snapshot(L.Callback):
        def on_train_batch_end(self, trainer, module, *args):
            opt = trainer.optimizers[0]
            snapshots.append(
                (copy.deepcopy(module.state_dict()), copy.deepcopy(opt.state_dict()["state"]))
            )

    lit = make()
    trainer(max_steps=3, callbacks=[Snapshot()]).fit(lit, loader(MANY, NONE, MANY))
    assert lit.losses[1] == 0.0
    (params1, state1), (params2, state2), (params3, _) = snapshots
    for k in params1:
        assert torch.equal(params1[k], params2[k]), k
    for i in state1:
        for k in state1[i]:
            assert torch.equal(state1[i][k], state2[i][k]), (i, k)
    assert all(torch.isfinite(v).all() for v in params3.values())
    assert not torch.equal(
        params2["model.wte.weight"], params3["model.wte.weight"]
    )  # learning goes on


def test_token_counts_are_exact_and_survive_resume(tmp_path):
    c_many, c_few = token_counts(MANY), token_counts(FEW)
    assert [int(c) for c in c_many] == [32, 30, 3]  # input B*T, non-pad, (row, segment) pairs
    assert [int(c) for c in c_few] == [32, 3, 1]  # the all-PAD row has no document

    lit = make()
    fit = trainer(max_steps=2, enable_checkpointing=True, default_root_dir=tmp_path)
    fit.fit(lit, loader(MANY, FEW))
    assert lit.tokens_seen == {"input": 64, "nonpad": 33, "supervised": 29, "documents": 4}
    assert lit.supervised_tokens_seen == 29
    path = tmp_path / "two.ckpt"
    fit.save_checkpoint(path)

    resumed = make(seed=1)
    trainer(max_steps=3, default_root_dir=tmp_path).fit(resumed, loader(MANY, MANY), ckpt_path=path)
    assert resumed.tokens_seen == {"input": 96, "nonpad": 63, "supervised": 56, "documents": 7}

    loaded = LitCausalLM.load_from_checkpoint(path)
    assert set(loaded.hparams) == {"model", "optim"}  # plain configs, no tensors
    assert loaded.model_config == lit.model_config and loaded.tokens_seen == lit.tokens_seen
    assert loaded.token_byte_lengths is None  # not persisted: set again from the tokenizer


def test_validation_totals_bits_per_byte_over_the_whole_set():
    byte_lengths = torch.randint(1, 5, (V,))
    byte_lengths[PAD] = 0
    lit = make(LitCausalLM)
    lit.set_token_byte_lengths(byte_lengths)
    metrics = trainer().validate(lit, loader(MANY, FEW), verbose=False)[0]

    model = lit.model
    with torch.no_grad():
        nats = [sum_ce(model, b).item() for b in (MANY, FEW)]
    n = [27, 2]
    nbytes = sum(int(byte_lengths[b["labels"][b["labels"] != -100]].sum()) for b in (MANY, FEW))
    loss = sum(nats) / sum(n)
    assert metrics["val/loss"] == pytest.approx(loss, rel=1e-6)
    assert metrics["val/ppl"] == pytest.approx(math.exp(loss), rel=1e-6)
    assert metrics["val/bpb"] == pytest.approx(sum(nats) / math.log(2) / nbytes, rel=1e-6)
    assert metrics["val/loss"] != pytest.approx((nats[0] / n[0] + nats[1] / n[1]) / 2, rel=1e-3)

    with pytest.raises(ValueError, match="token_byte_lengths"):
        lit.set_token_byte_lengths([1, 2, 3])


def test_tiny_batch_overfits():
    torch.manual_seed(0)
    lit = LitCausalLM(
        tiny_config(context_length=T), {"lr": 1e-2, "warmup_steps": 5, "weight_decay": 0.0}
    )
    trainer(max_steps=60, precision="32-true", gradient_clip_val=1.0).fit(lit, loader(*[MANY] * 60))
    assert lit.last_loss < 0.1


def test_logged_tags_and_cumulative_counts():
    logger = Capture()
    lit = make(LitCausalLM)
    lit.set_token_byte_lengths(torch.ones(V, dtype=torch.int64))
    run = trainer(
        max_steps=4, logger=logger, log_every_n_steps=2, val_check_interval=4, limit_val_batches=1,
        callbacks=[StepMetrics()],
    )  # fmt: skip
    run.fit(lit, loader(MANY, FEW, MANY, FEW), loader(FEW))
    train = [(step, m) for step, m in logger.rows if "train/loss" in m]
    assert [step for step, _ in train] == [1, 3]  # steps 2 and 4 (0-based step index)
    tags = {
        "train/loss", "lr", "grad_norm", "tokens/input", "tokens/nonpad", "tokens/supervised",
        "tokens/documents", "throughput/input_tokens_per_s", "throughput/nonpad_tokens_per_s",
        "throughput/supervised_tokens_per_s",
    }  # fmt: skip
    for _, m in train:
        assert tags <= m.keys()
        assert m["throughput/input_tokens_per_s"] >= m["throughput/nonpad_tokens_per_s"] > 0
    assert train[0][1]["tokens/supervised"] == 29 and train[1][1]["tokens/supervised"] == 58
    assert train[1][1]["tokens/input"] == 128 and train[1][1]["tokens/documents"] == 8
    assert train[1][1]["train/loss"] == pytest.approx(lit.last_loss, rel=1e-6)
    val = [m for _, m in logger.rows if "val/loss" in m]
    assert len(val) == 1 and {"val/loss", "val/bpb", "val/ppl"} <= val[0].keys()
    assert logger.hparams["model"]["vocab_size"] == V


def test_initial_loss_is_about_ln_vocab():
    lit = make(LitCausalLM)
    with pytest.warns(UserWarning, match="no token_byte_lengths"):
        metrics = trainer().validate(lit, loader(MANY), verbose=False)[0]
    assert metrics["val/loss"] == pytest.approx(math.log(V), abs=0.15)
    assert "val/bpb" not in metrics


def test_schedule_and_weight_decay_groups():
    f = partial(lr_factor, warmup=10, total=110, min_ratio=0.1)
    assert f(0) == pytest.approx(0.1) and f(9) == 1.0 and f(10) == 1.0
    assert f(60) == pytest.approx(0.55)  # half-way down the cosine
    assert f(110) == pytest.approx(0.1) and f(1000) == pytest.approx(0.1)
    # optim.anneal_by_time: the cosine follows whichever clock is further along
    assert f(60, on_time=0.2) == pytest.approx(0.55) and f(60, on_time=1.0) == pytest.approx(0.1)
    assert f(35, on_time=0.5) == pytest.approx(0.55) and f(5, on_time=1.0) == f(5)  # warmup
    assert partial(f, total=math.inf)(1000, on_time=0.5) == pytest.approx(0.55)
    assert partial(f, total=math.inf)(1000) == 1.0  # no horizon, no time: flat

    lit = make(LitCausalLM, max_steps=100, weight_decay=0.1, lr=1e-3, embedding_lr_ratio=8)
    conf = lit.configure_optimizers()
    matrices, embedding, vectors = conf["optimizer"].param_groups
    assert all(p.dim() == 2 for p in matrices["params"]) and matrices["weight_decay"] == 0.1
    assert embedding["params"] == [lit.model.wte.weight] and embedding["weight_decay"] == 0.1
    assert all(p.dim() == 1 for p in vectors["params"]) and vectors["weight_decay"] == 0.0
    n_params = sum(len(g["params"]) for g in (matrices, embedding, vectors))
    assert n_params == len(list(lit.parameters()))
    assert conf["lr_scheduler"]["interval"] == "step"
    # one schedule for all groups: the embedding keeps its ratio at every step
    scheduler = conf["lr_scheduler"]["scheduler"]
    schedule = partial(lr_factor, warmup=0, total=100, min_ratio=0.1)
    for step in range(30):
        lrs = [g["lr"] for g in conf["optimizer"].param_groups]
        assert lrs == pytest.approx([1e-3 * schedule(step) * r for r in (1, 8, 1)])
        conf["optimizer"].step()
        scheduler.step()


def test_time_progress_runs_on_rank_zeros_clock_and_survives_a_checkpoint():
    """optim.anneal_by_time: every rank takes rank 0's elapsed seconds (so all set one lr),
    and the clock's start, warmup's end, is in the checkpoint."""
    lit = make(LitCausalLM, anneal_by_time=True)
    timer = Timer(duration={"seconds": 110})  # not started: elapsed 0 on this rank
    rank0_clock = iter([(10.0, 110.0), (60.0, 110.0)])  # (elapsed, limit) on rank 0
    strategy = SimpleNamespace(broadcast=lambda obj, src: next(rank0_clock))
    lit._trainer = SimpleNamespace(world_size=2, strategy=strategy)
    assert lit._time_progress(timer) == 0.0  # warmup ends at rank 0's 10 s
    assert lit._time_progress(timer) == pytest.approx(0.5)  # 50 of the 100 s left
    checkpoint = {}
    lit.on_save_checkpoint(checkpoint)
    resumed = make(LitCausalLM, anneal_by_time=True)
    resumed.on_load_checkpoint(checkpoint)
    assert resumed._warmup_end_s == 10.0


class RankData(Probe):
    """Rank r trains on its own pair of micro-batches; rank 0 saves the step's gradients."""

    def __init__(self, *args, out=None, chunked_from=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.out, self.chunked_from = out, chunked_from

    def on_fit_start(self):  # in each spawned rank: the loss path the test asks for
        from packlm.model import fused

        fused.CE_CHUNKED_FROM = self.chunked_from

    def train_dataloader(self):
        shards = [(MANY, FEW), (FEW, NONE)]
        return loader(*shards[self.global_rank])

    def on_before_optimizer_step(self, optimizer):
        super().on_before_optimizer_step(optimizer)
        if self.global_rank == 0:
            torch.save(
                {"grads": self.step_grads, "loss": self.losses, "seen": self.tokens_seen}, self.out
            )


@pytest.mark.slow
@pytest.mark.parametrize("chunked_from", [2**62, 0], ids=["logits", "chunked"])
def test_two_ddp_ranks_equal_one_process(tmp_path, chunked_from):
    out = tmp_path / "rank0.pt"
    torch.manual_seed(0)
    lit = RankData(
        tiny_config(context_length=T), {"warmup_steps": 0}, out=str(out), chunked_from=chunked_from
    )
    ddp = trainer(
        max_steps=1,
        accumulate_grad_batches=2,
        strategy="ddp_spawn",
        devices=2,
        use_distributed_sampler=False,
    )
    ddp.fit(lit)
    got = torch.load(out)
    expected, expected_loss = reference_grads(MANY, FEW, FEW, NONE)
    assert_grads_equal(got["grads"], expected)
    assert got["loss"] == [pytest.approx(expected_loss, rel=1e-12)]
    assert got["seen"]["supervised"] == 27 + 2 + 2 and got["seen"]["input"] == 4 * 32


class SkewedClock(LitCausalLM):
    """Rank 1's Timer runs `skew` seconds ahead of rank 0's (ranks start apart); each rank
    saves the lr of every step and its final weights."""

    def __init__(self, *args, out=None, skew=0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.out, self.skew, self.lrs = out, skew, []

    def on_train_start(self):
        if self.global_rank == 1:
            timer = time_limit(self.trainer)
            elapsed = timer.time_elapsed
            timer.time_elapsed = lambda stage="train": elapsed(stage) + self.skew

    def train_dataloader(self):
        return loader(MANY, FEW)

    def on_before_optimizer_step(self, optimizer):
        super().on_before_optimizer_step(optimizer)
        self.lrs.append(optimizer.param_groups[0]["lr"])

    def on_train_end(self):
        weights = {k: v.clone() for k, v in self.model.state_dict().items()}
        torch.save({"lrs": self.lrs, "weights": weights}, f"{self.out}{self.global_rank}.pt")


@pytest.mark.slow
def test_anneal_by_time_sets_one_lr_on_ranks_whose_clocks_differ(tmp_path):
    """optim.anneal_by_time under DDP (2 ranks, gloo): rank 1's clock is 30 s ahead, yet both
    set rank 0's lr at every step, to the last bit, and end with the same weights."""
    out = str(tmp_path / "rank")
    torch.manual_seed(0)
    optim = {"warmup_steps": 1, "anneal_by_time": True, "max_steps": 10**6, "lr": 1e-2}
    lit = SkewedClock(tiny_config(context_length=T), optim, out=out, skew=30.0)
    ddp = trainer(max_steps=6, max_time={"seconds": 60}, strategy="ddp_spawn", devices=2,
                  use_distributed_sampler=False)  # fmt: skip
    ddp.fit(lit)
    rank0, rank1 = (torch.load(f"{out}{r}.pt") for r in (0, 1))
    assert len(rank0["lrs"]) == 6 and rank0["lrs"] == rank1["lrs"]
    # seconds into the minute: near the peak (rank 1's own clock, 30 s ahead, sees only 30 s
    # left after warmup, so its cosine would run twice as fast)
    assert 0.9 * 1e-2 < rank0["lrs"][-1] < 1e-2
    for name, weight in rank0["weights"].items():
        torch.testing.assert_close(rank1["weights"][name], weight, rtol=0, atol=0)


def test_stream_batches_are_marked_on_the_cpu():
    lit = make(LitCausalLM)
    B_, T_ = MANY["input_ids"].shape
    stream = dict(MANY, segment_ids=torch.zeros(B_, T_, dtype=torch.int32))
    stream["position_ids"] = torch.arange(T_).expand(B_, T_)
    marked = mark_stream(stream)  # what the DataModule's on_before_batch_transfer does
    assert marked["stream"] is True and mark_stream(MANY)["stream"] is False
    # the flag only picks the is_causal kernel: same loss as the all-zero mask
    with torch.no_grad():
        torch.testing.assert_close(lit._sum_ce(marked)[0], lit._sum_ce(stream)[0])


def test_a_compiled_run_gives_every_batch_its_segment_ids():
    """model.compile: a stream batch must not reach the graph as segment_ids=None while the
    others bring a tensor, or every graph compiles twice (once for each)."""
    B_, T_ = MANY["input_ids"].shape
    stream = mark_stream(dict(MANY, segment_ids=torch.zeros(B_, T_, dtype=torch.int32)))
    for compile in (False, True):
        torch.manual_seed(0)
        lit = LitCausalLM(tiny_config(context_length=T, compile=compile), {})
        seen = []
        eager = lit.model

        def record(input_ids, segment_ids=None, position_ids=None, eager=eager, seen=seen):
            seen.append(segment_ids)
            return eager(input_ids, segment_ids, position_ids)

        object.__setattr__(lit, "_run_model", record)  # the compiled view, not compiled here
        with torch.no_grad():
            lit._sum_ce(stream)
            lit._sum_ce(mark_stream(MANY))
        kinds = [type(s).__name__ for s in seen]
        assert kinds == (["Tensor", "Tensor"] if compile else ["NoneType", "Tensor"]), compile


@pytest.mark.slow
def test_a_compiled_step_compiles_one_graph_for_stream_and_document_batches():
    from torch._dynamo.utils import counters

    B_, T_ = MANY["input_ids"].shape
    stream = mark_stream(dict(MANY, segment_ids=torch.zeros(B_, T_, dtype=torch.int32)))
    torch.manual_seed(0)
    lit = LitCausalLM(tiny_config(context_length=T, compile=True), {})
    torch._dynamo.reset()
    counters.clear()
    for batch in (mark_stream(MANY), stream, mark_stream(FEW), stream):
        lit._sum_ce(batch)[0].backward()
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])


@pytest.mark.slow
def test_a_compiled_run_takes_the_chunked_head_with_the_eager_loss_and_gradients(monkeypatch):
    """model.compile compiles the trunk (`Transformer.hidden`) apart, so that large logits
    still go through the chunked head (fused.linear_cross_entropy) as in eager runs: the same
    loss and gradients as the eager module's, no [B, T, V] logits made."""
    from packlm.model import fused

    monkeypatch.setattr(fused, "CE_CHUNKED_FROM", 0)  # every batch takes the chunked head
    runs = []
    for compile in (False, True):
        torch.manual_seed(0)
        lit = LitCausalLM(tiny_config(context_length=T, compile=compile), {})
        if compile:
            object.__setattr__(lit, "_run_model", None)  # the logits path must not be taken
        loss = lit._sum_ce(mark_stream(MANY))[0]
        loss.backward()
        runs.append((loss.detach(), {k: p.grad for k, p in lit.named_parameters()}))
    (eager, eager_grads), (compiled, compiled_grads) = runs
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    for name, grad in eager_grads.items():
        torch.testing.assert_close(compiled_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def document_reference_grads(*batches) -> tuple[dict[str, torch.Tensor], float]:
    """Gradient of the mean over all (row, segment) pieces with a target of their mean CE."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(context_length=T)).double()
    piece_means = []
    for b in batches:
        logits = model(b["input_ids"], b["segment_ids"], b["position_ids"])
        ce = F.cross_entropy(logits.flatten(0, 1), b["labels"].flatten(), reduction="none")
        ce = ce.view(b["labels"].shape)
        for row in range(b["labels"].shape[0]):
            for seg in b["segment_ids"][row].unique().tolist():
                mask = (b["segment_ids"][row] == seg) & (b["labels"][row] != -100)
                if seg >= 0 and mask.any():
                    piece_means.append(ce[row][mask].mean())
    loss = torch.stack(piece_means).mean()
    loss.backward()
    return {f"model.{k}": p.grad for k, p in model.named_parameters()}, loss.item()


def test_document_weighting_is_exact_under_accumulation(head_path, count_path):
    expected, expected_loss = document_reference_grads(MANY, FEW)
    accumulated = make()
    accumulated.model_config.loss_weighting = "document"
    trainer(max_steps=1, accumulate_grad_batches=2).fit(accumulated, loader(MANY, FEW))
    assert_grads_equal(accumulated.step_grads, expected)
    assert accumulated.losses == [pytest.approx(expected_loss, rel=1e-12)]
    assert accumulated.last_step.target_documents == 4  # MANY: 2 + 1 pieces, FEW: 1
    # it differs from token weighting: the 15-target piece no longer outweighs the 3-target one
    by_token, _ = reference_grads(MANY, FEW)
    assert not torch.allclose(by_token["model.wte.weight"], expected["model.wte.weight"], atol=1e-6)


def test_document_weighting_step_without_targets_is_zero(head_path, count_path):
    lit = make()
    lit.model_config.loss_weighting = "document"
    trainer(max_steps=1).fit(lit, loader(NONE))
    assert lit.losses == [0.0] and all(g is None for g in lit.step_grads.values())


def test_attention_useful_fraction_counts_the_pairs_the_mask_allows():
    from packlm.model.loss import attention_pairs

    allowed, dense = attention_pairs(MANY)  # rows: pieces of 7 + 8 tokens (+1 PAD), and 15 (+1)
    assert float(allowed) == (7 * 8 + 8 * 9 + 15 * 16) / 2 and float(dense) == 2 * 16 * 17 / 2
    lit = make()
    trainer(max_steps=1).fit(lit, loader(MANY))
    assert lit.last_step.attention_useful_fraction == pytest.approx(float(allowed) / float(dense))


def test_counts_on_the_cpu_are_the_device_counts():
    """`packlm.batch.counts` (numpy, before the batch moves) gives every count the device
    functions give, on random rows: pieces of any length, PAD anywhere, no target at all,
    and rows without segment ids."""
    from packlm.batch import COUNTED
    from packlm.model.loss import attention_pairs, document_weights

    rng = np.random.default_rng(0)
    for _ in range(300):
        B, T = rng.integers(1, 6), rng.integers(1, 20)
        seg = np.sort(rng.integers(0, min(4, T), (B, T)), axis=1).astype(np.int32)
        seg = np.where(rng.random((B, T)) < 0.15, -1, seg)
        labels = np.where(rng.random((B, T)) < rng.random(), -100, rng.integers(0, 50, (B, T)))
        for segments in (seg, None):
            batch = {"input_ids": torch.zeros(B, T, dtype=torch.long),
                     "labels": torch.from_numpy(labels)}  # fmt: skip
            if segments is not None:
                batch["segment_ids"] = torch.from_numpy(segments)
            n_input, n_nonpad, n_docs = token_counts(batch)
            allowed, dense = attention_pairs(batch)
            _, pieces = document_weights(batch["labels"], batch.get("segment_ids"))
            supervised = (batch["labels"] != -100).sum()
            device = dict(supervised=supervised, input=n_input, nonpad=n_nonpad, documents=n_docs,
                          target_documents=pieces, attention_pairs=allowed, dense_pairs=dense)  # fmt: skip
            host = with_counts(batch)["counts"]
            assert host.tolist() == [float(device[k]) for k in COUNTED]


def test_a_bf16_mixed_fit_with_clipping_runs_a_fused_adamw():
    """Lightning's own clipping raised here (fused optimizer under mixed precision)."""
    lit = make()
    before = copy.deepcopy(lit.model.state_dict())
    fit = trainer(max_steps=1, precision="bf16-mixed", gradient_clip_val=1.0)
    fit.fit(lit, loader(MANY))
    assert fit.optimizers[0].defaults["fused"] is True
    changed = [not torch.equal(before[k], v) for k, v in lit.model.state_dict().items()]
    assert all(changed)
