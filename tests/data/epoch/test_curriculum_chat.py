"""data.curriculum on a store with conversations: `until` counts the targets the chat mask
keeps (data.chat_supervised), exactly the labels the loader gives, so a phase switches at the
first global batch before which the batches actually produced held `until` supervised targets;
exact resume past such a switch. The store's token at position p is p, so every label names
the store token it is, and its role code says whether it may be one."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch

from helpers.chat_stores import chat_documents, write_chat_store
from helpers.plans import PAD, config, position_store, write_position_store
from packlm.data.datamodule import PackedDataModule
from packlm.data.epoch import chat_mask as chat_mask_module
from packlm.data.epoch.chat_mask import ChatMask
from packlm.data.epoch.collate import collate
from packlm.data.epoch.curriculum import phase_at, phases_of, sample_targets
from packlm.data.epoch.loader import WindowDataset
from packlm.data.epoch.plan import build_plan
from packlm.data.epoch.sampler import PlanSampler
from packlm.data.store.prepared import PreparedData
from packlm.tokenizer.chat import supervised_table

WIDTHS = (4, 8, 16)
TRAINER = dict(
    accelerator="cpu", logger=False, use_distributed_sampler=False, limit_val_batches=0,
    reload_dataloaders_every_n_epochs=1, enable_checkpointing=False, enable_progress_bar=False,
    enable_model_summary=False, num_sanity_val_steps=0,
)  # fmt: skip
pytestmark = pytest.mark.filterwarnings(
    "ignore:You passed in a `val_dataloader` but have no `validation_step`"
)


LENGTHS, ROLES = chat_documents(140, seed=1)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("chat_curriculum")
    train = write_chat_store(root / "train", LENGTHS, ROLES)
    val = write_position_store(root / "val", LENGTHS[:5])
    return PreparedData(None, root, train.path, val.path, train.manifest, val.manifest)


class Recorder(L.LightningModule):
    """Records every training batch (input ids, labels) and its epoch; learns nothing."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.seen: list[tuple[np.ndarray, np.ndarray]] = []
        self.epochs: list[int] = []

    def training_step(self, batch, batch_idx):
        self.epochs.append(self.current_epoch)
        self.seen.append((batch["input_ids"].numpy().copy(), batch["labels"].numpy().copy()))
        return (self.w * batch["input_ids"].float().mean()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


class SaveAt(L.Callback):
    def __init__(self, steps, directory):
        self.steps, self.directory = set(steps), directory

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step in self.steps:
            trainer.save_checkpoint(self.directory / f"{trainer.global_step}.ckpt")


def curriculum(until):
    return [{"window": 4, "stride": 4, "until": until[0]},
            {"window": 8, "stride": 6, "until": until[1]}, {"window": 16, "stride": 8}]  # fmt: skip


def fit(prepared, data, epochs=3, ckpt_path=None, callbacks=()) -> Recorder:
    dm = PackedDataModule(prepared=prepared, batch_size=3, seed=5, random_offset=True, **data)
    model = Recorder()
    trainer = L.Trainer(max_epochs=epochs, callbacks=list(callbacks), **TRAINER)
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model


def supervised(seen) -> np.ndarray:
    """int64 [batches]: the supervised targets (labels != -100) of each batch produced."""
    return np.array([int((labels != -100).sum()) for _, labels in seen], dtype=np.int64)


def assert_switches_follow_the_labels(model: Recorder, phases, chat_supervised: str) -> None:
    """Each batch's window is the phase of the supervised targets produced before it."""
    counts = supervised(model.seen)
    before = np.cumsum(counts) - counts  # [batches]
    widths = [ids.shape[1] for ids, _ in model.seen]
    expected = [phases[phase_at(phases, int(b))].window for b in before]
    assert widths == expected
    codes = np.concatenate([np.zeros(n, np.uint8) if r is None else r
                            for n, r in zip(LENGTHS, ROLES, strict=True)])  # fmt: skip
    table = supervised_table(chat_supervised)
    for _, labels in model.seen:  # every label is a store token whose role trains
        assert table[codes[labels[labels != -100]]].all()


SETTINGS = [
    pytest.param("assistant", "document", False, id="assistant-document"),
    pytest.param("all", "document", True, id="all-document-bos", marks=pytest.mark.slow),
    pytest.param("assistant", "stream", True, id="assistant-stream-bos"),
    pytest.param("all", "stream", True, id="all-stream-bos"),
    pytest.param("assistant", "none", True, id="assistant-none-bos", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("chat_supervised", "packing", "bos"), SETTINGS)
def test_phases_switch_after_until_supervised_targets_and_resume_exactly(
    prepared, tmp_path, chat_supervised, packing, bos
):
    data = dict(chat_supervised=chat_supervised, packing=packing, bos=bos)
    probe = fit(prepared, {**data, "curriculum": curriculum([10**9, 10**9 + 1])}, epochs=1)
    per_epoch = int(supervised(probe.seen).sum())  # phase 0's supervised targets, one epoch
    until = [per_epoch // 2, per_epoch + per_epoch // 2]  # mid epoch 0, then later
    cfg = {**data, "curriculum": curriculum(until)}
    model = fit(prepared, cfg)
    phases = phases_of(config(curriculum=cfg["curriculum"]))
    assert_switches_follow_the_labels(model, phases, chat_supervised)
    widths = [ids.shape[1] for ids, _ in model.seen]
    switches = [i for i in range(1, len(widths)) if widths[i] != widths[i - 1]]
    assert [widths[0]] + [widths[i] for i in switches] == list(WIDTHS)  # both, in order
    assert all(model.epochs[i] == model.epochs[i - 1] for i in switches)  # mid-epoch
    # a resume from a checkpoint past a switch (mid-epoch and the next epoch's first batch)
    first_epoch = model.epochs.count(0)
    stops = sorted({switches[0] + 1, switches[1] + 2, first_epoch})
    full = fit(prepared, cfg, callbacks=[SaveAt(stops, tmp_path)])
    assert len(full.seen) == len(model.seen)
    for stop in stops:
        rest = fit(prepared, cfg, ckpt_path=tmp_path / f"{stop}.ckpt")
        assert len(rest.seen) == len(full.seen) - stop, stop
        for (ids, labels), (ids2, labels2) in zip(rest.seen, full.seen[stop:], strict=True):
            assert np.array_equal(ids, ids2) and np.array_equal(labels, labels2), stop


def test_the_mask_moves_the_switch(prepared):
    """The same `until` switches later under the assistant mask than with every role."""
    cfg = {"packing": "document", "curriculum": curriculum([150, 10**9])}
    widths = {
        mode: [ids.shape[1] for ids, _ in fit(prepared, {**cfg, "chat_supervised": mode}, 1).seen]
        for mode in ("assistant", "all")
    }
    assert widths["all"].index(8) < widths["assistant"].index(8)


@pytest.mark.parametrize("packing", ["document", "stream"])
def test_until_past_the_whole_run_never_switches_and_until_one_switches_after_a_target(
    tmp_path, packing
):
    """Probes: `until` above every supervised target of the run keeps phase 0; until=1 moves
    on at the first batch after one that held a target, and batches of context only (no
    assistant token: no target under the mask) never count."""
    lengths, roles = chat_documents(60, seed=4, context_first=30)
    train = write_chat_store(tmp_path / "train", lengths, roles)
    val = write_position_store(tmp_path / "val", lengths[:3])
    prep = PreparedData(None, tmp_path, train.path, val.path, train.manifest, val.manifest)
    data = dict(packing=packing, shuffle=False, shuffle_documents=False, bos=True)
    never = fit(prep, {**data, "curriculum": curriculum([10**12, 10**12 + 1])}, epochs=2)
    assert {ids.shape[1] for ids, _ in never.seen} == {4}
    once = fit(prep, {**data, "curriculum": curriculum([1, 10**12])}, epochs=1)
    counts = supervised(once.seen)
    first = int(np.flatnonzero(counts)[0])  # the first batch holding a target
    assert first >= 5  # the context-only conversations come first: batches of no target
    widths = [ids.shape[1] for ids, _ in once.seen]
    assert widths[: first + 1] == [4] * (first + 1) and widths[first + 1] == 8
    phases = phases_of(config(curriculum=curriculum([1, 10**12])))
    expected = [phases[phase_at(phases, int(b))].window for b in np.cumsum(counts) - counts]
    assert widths == expected


# --- the count itself, sample by sample, against the loader's labels --------------------------


@pytest.mark.parametrize("packing", ["none", "document", "stream"])
@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("chat_supervised", ["assistant", "all"])
def test_counted_targets_are_the_labels_under_the_chat_mask(packing, bos, chat_supervised):
    lengths, roles = chat_documents(90, seed=7)
    store = position_store(lengths)
    store.roles = np.concatenate(
        [np.zeros(n, np.uint8) if r is None else r for n, r in zip(lengths, roles, strict=True)]
    )
    cfg = config(window=7, stride=5, packing=packing, bos=bos, shuffle=True,
                 shuffle_documents=True, random_offset=True, chat_supervised=chat_supervised)  # fmt: skip
    plan = build_plan(lengths + bos, cfg, 2)
    plan.chat_mask = ChatMask.of(store, chat_supervised, bos)
    dataset = WindowDataset("unused", 7, PAD, bos_id=-3 if bos else None,
                            chat_supervised=chat_supervised)  # fmt: skip
    dataset._store = store
    counted = sample_targets(plan, np.arange(plan.n_samples))
    sampler = PlanSampler(lambda e: plan, 1, epoch=2)
    labelled = [int((collate(dataset[b], packing)["labels"] != -100).sum()) for b in sampler]
    assert counted.tolist() == labelled
    plan.chat_mask = None  # without the mask: every target (a BOS inside a stream row too)
    unmasked = sample_targets(plan, np.arange(plan.n_samples))
    assert (unmasked >= counted).all()
    if chat_supervised == "assistant" or (packing == "stream" and bos):
        assert unmasked.sum() > counted.sum()
    else:  # `all`: the mask drops nothing but a BOS, which only a stream row reads as a target
        assert unmasked.tolist() == counted.tolist()


def test_a_plain_text_store_has_no_mask_and_a_mixed_one_reads_roles_in_bounded_chunks(
    prepared, monkeypatch
):
    """Only a store with roles pays: a plain store's plan has no mask; with one, no call reads
    more than TOKENS tokens (or one global batch's) and the switches do not depend on it."""
    assert ChatMask.of(SimpleNamespace(roles=None), "assistant", False) is None
    val = (prepared.val_dir, prepared.val_manifest)  # a store of plain text
    plain = PackedDataModule(prepared=PreparedData(None, prepared.tokenizer_dir, val[0], val[0],
                                                   val[1], val[1]))  # fmt: skip
    assert plain.plan(0).chat_mask is None
    cfg = {"packing": "document", "curriculum": curriculum([300, 900])}
    reference = [ids.shape[1] for ids, _ in fit(prepared, cfg, epochs=2).seen]
    reads, allowed = [], ChatMask.allowed

    def counting(self, doc, start, length):
        reads.append(int(np.sum(length)))
        return allowed(self, doc, start, length)

    monkeypatch.setattr(chat_mask_module, "TOKENS", 40)
    monkeypatch.setattr(ChatMask, "allowed", counting)
    small = [ids.shape[1] for ids, _ in fit(prepared, cfg, epochs=2).seen]
    assert small == reference
    assert reads and max(reads) <= max(40, 3 * (16 + 1))  # TOKENS, or one global batch
