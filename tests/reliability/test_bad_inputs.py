"""The bad-input catalogue (docs/reliability.md): each case is a clear error naming the file,
record or config key, or a documented handling whose count is logged.

Cases already proven elsewhere are only named in the catalogue; this module holds the rest.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.errors import ConfigCompositionException

import packlm.runtime.run_folder as run_folder
import packlm.train.report as train_report
from packlm.config.data import DataConfig
from packlm.config.model import ModelConfig
from packlm.config.schema import validate_config
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.datamodule import PackedDataModule
from packlm.data.store.prepared import PreparedData, prepare_stores
from packlm.data.store.sources import SourceError
from packlm.data.store.token_store import write_store
from packlm.errors import ConfigError
from packlm.model.lit_module import LitCausalLM
from packlm.train import train

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256))


def tokenizer(vocab: int = 300) -> TokenizerConfig:
    return TokenizerConfig(vocab_size=vocab)


def corpus_with(tmp_path: Path, tiny_corpus: Path, name: str, data: bytes) -> Path:
    """The tiny corpus plus one extra file."""
    root = tmp_path / "src"
    root.mkdir()
    for p in tiny_corpus.iterdir():
        (root / p.name).write_bytes(p.read_bytes())
    (root / name).write_bytes(data)
    return root


def build(root: Path, cache: Path, **data):
    data = {"sources": [f"{root}/*"], "val_fraction": 0.2, **data}
    return prepare_stores(DataConfig(**data), tokenizer(), cache, progress=False, num_workers=0)


def logged_counts(prepared, caplog) -> str:
    dm = PackedDataModule(prepared=prepared, window=8, num_workers=0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="packlm.train.report"):
        train_report.log_data_counts(dm)
    return "\n".join(r.getMessage() for r in caplog.records)


# --- sources ----------------------------------------------------------------------------------


def test_an_empty_file_is_dropped_and_counted(tiny_corpus, tmp_path, caplog):
    prepared = build(corpus_with(tmp_path, tiny_corpus, "empty.txt", b""), tmp_path / "cache")
    assert prepared.train_manifest["counts"]["dropped"]["empty"] == 1
    assert "dropped 1 empty, 0 invalid_utf8" in logged_counts(prepared, caplog)


def test_a_binary_file_is_skipped_and_counted_in_a_walk_and_named_alone(
    tiny_corpus, tmp_path, caplog
):
    root = corpus_with(tmp_path, tiny_corpus, "image.png", PNG)
    prepared = build(root, tmp_path / "cache")  # a glob: the binary file is skipped, counted
    assert prepared.train_manifest["counts"]["dropped"]["binary"] == 1
    assert prepared.train_manifest["counts"]["dropped"]["invalid_utf8"] == 0
    assert "1 binary" in logged_counts(prepared, caplog)
    alone = DataConfig(sources=[str(tiny_corpus), str(root / "image.png")], val_fraction=0.2)
    with pytest.raises(SourceError, match=rf"{root}/image\.png: a PNG image, not text") as e:
        prepare_stores(alone, tokenizer(), tmp_path / "cache2", progress=False, num_workers=0)
    assert "encoding_errors" not in str(e.value)  # never the encoding advice


def test_invalid_utf8_text_is_an_error_or_skipped_or_replaced_and_counted(
    tiny_corpus, tmp_path, caplog
):
    root = corpus_with(tmp_path, tiny_corpus, "latin1.txt", b"caf\xe9 au lait, " * 20)
    with pytest.raises(SourceError, match=rf"{root}/latin1\.txt: not valid UTF-8 at byte offset 3"):
        build(root, tmp_path / "cache")
    skipped = build(root, tmp_path / "cache", encoding_errors="skip")
    assert skipped.train_manifest["counts"]["dropped"]["invalid_utf8"] == 1
    assert "dropped 0 empty, 1 invalid_utf8" in logged_counts(skipped, caplog)
    replaced = build(root, tmp_path / "cache", encoding_errors="replace")
    counts = [replaced.manifests[s]["counts"]["replaced_invalid_utf8"] for s in ("train", "val")]
    assert sum(counts) == 1
    assert "replaced invalid UTF-8 in 1" in logged_counts(replaced, caplog)


def test_a_corpus_of_empty_files_is_an_error(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    for i in range(3):
        (root / f"{i}.txt").write_bytes(b"")
    with pytest.raises(SourceError, match=r"data\.sources=.*: no training documents \(3 empty"):
        build(root, tmp_path / "cache")


def test_a_missing_tokenizer_path_or_a_corrupt_tokenizer_file_is_named(tiny_corpus, tmp_path):
    with pytest.raises(ConfigError, match=r"tokenizer\.path='/no/such/dir': no such directory"):
        prepare_stores(
            DataConfig(sources=[f"{tiny_corpus}/*.txt"]),
            TokenizerConfig(path="/no/such/dir"),
            tmp_path / "cache",
            progress=False,
        )
    good = build(tiny_corpus, tmp_path / "cache")
    saved = tmp_path / "tok"
    good.tokenizer.save(saved)
    (saved / "vocab.json").write_bytes((saved / "vocab.json").read_bytes()[:-40])
    with pytest.raises(ValueError, match=r"tok/vocab\.json: not valid JSON"):
        prepare_stores(
            DataConfig(sources=[f"{tiny_corpus}/*.txt"]),
            TokenizerConfig(path=str(saved)),
            tmp_path / "cache",
            progress=False,
        )


# --- degenerate documents ---------------------------------------------------------------------


@pytest.mark.parametrize("packing", ["none", "document", "stream"])
def test_one_token_documents_give_valid_batches_and_a_finite_loss(tmp_path, packing):
    """Documents of 1 token (an EOS alone) and 2 tokens, in every packing mode."""
    eos, pad, vocab = 5, 6, 7
    docs = [np.array([eos]) if i % 2 else np.array([i % 5, eos]) for i in range(40)]
    train = write_store(tmp_path / "train", docs, vocab, eos, pad)
    val = write_store(tmp_path / "val", docs[:4], vocab, eos, pad)
    prepared = PreparedData(None, tmp_path, train.path, val.path, train.manifest, val.manifest)
    dm = PackedDataModule(
        prepared=prepared, window=8, stride=8, packing=packing, batch_size=4, num_workers=0
    )
    lit = LitCausalLM(
        ModelConfig(vocab_size=vocab, context_length=8, n_layer=1, n_head=2, n_embd=16)
    )
    batches = list(dm.train_dataloader())
    n_sup = sum(int((b["labels"] != -100).sum()) for b in batches)
    assert n_sup == dm.plan_statistics(0)["supervised_tokens"] > 0
    for batch in batches:
        sum_ce, supervised = lit._sum_ce(dm.on_before_batch_transfer(batch, 0))
        assert torch.isfinite(sum_ce) and (sum_ce == 0) == (supervised.sum() == 0)


def test_one_document_longer_than_every_window_and_pack(tmp_path):
    """A 5000-token document with window 8 and pack_size 9: never cut before windowing,
    every window inside it, every token a target exactly once (stride = window)."""
    eos, pad, vocab = 0, 1, 5002
    long = np.concatenate([np.arange(2, 5001), [eos]])  # ids = positions + 2
    train = write_store(tmp_path / "train", [np.array([3, eos]), long], vocab, eos, pad)
    prepared = PreparedData(None, tmp_path, train.path, train.path, train.manifest, train.manifest)
    dm = PackedDataModule(
        prepared=prepared, window=8, stride=8, pack_size=9, random_offset=False,
        tail="pad", batch_size=64, num_workers=0,
    )  # fmt: skip
    labels = np.concatenate([b["labels"].numpy().ravel() for b in dm.train_dataloader()])
    targets = labels[labels >= 2]
    assert np.array_equal(
        np.sort(targets), np.arange(3, 5001)
    )  # each once (the first is input only)


# --- config keys --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.pack_size=16", r"^data\.pack_size=16: must be at least data\.window \+ 1 = 33"),
        ("data.batch_size=0", r"^data\.batch_size=0"),
        ("data.val_fraction=1.0", r"^data\.val_fraction=1\.0"),
        ("data.tail=wrap", r"^data\.tail='wrap'"),
        ("data.encoding_errors=ignore", r"^data\.encoding_errors='ignore'"),
        ("train.checkpoint_every_n_steps=0", r"^train\.checkpoint_every_n_steps=0"),
        ("train.max_supervised_tokens=0", r"^train\.max_supervised_tokens=0"),
        ("trainer.accumulate_grad_batches=0", r"^trainer\.accumulate_grad_batches=0"),
        ("+trainer.logger=csv", r"^trainer\.logger: not settable: .*`logger` group"),
        (
            "+trainer.use_distributed_sampler=true",
            r"^trainer\.use_distributed_sampler: not settable",
        ),
        ("trainer.max_time=5", r"^trainer\.max_time=5: expected"),
        ("trainer.benchmark=yes", r"^trainer\.benchmark='yes': expected"),
        ("+trainer.max_stesp=3", r"^trainer\.max_stesp: unknown key \(did you mean max_steps"),
        ("seed=-1", r"^seed=-1: must be an integer in \[0, 2\*\*32\)"),
        ("optimized_metric=val/acc", r"^optimized_metric='val/acc': allowed"),
    ],
)
def test_a_bad_value_names_its_key(compose_tiny, override, message):
    with pytest.raises(ConfigError, match=message):
        validate_config(compose_tiny(override))


@pytest.mark.parametrize(
    ("override", "key"), [("data.windw=3", "data.windw"), ("data.window=abc", "data.window")]
)
def test_an_unknown_key_or_a_wrong_type_fails_at_compose_time_naming_it(
    compose_tiny, override, key
):
    with pytest.raises(ConfigCompositionException) as e:
        compose_tiny(override)
    assert key in str(e.value) + str(e.value.__cause__)


# --- checkpoints and output directories ---------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_corpus, cache_dir) -> Path:
    from hydra import compose, initialize_config_dir

    from helpers.runs import reliability_overrides
    from packlm.config.schema import CONFIG_DIR

    run = tmp_path_factory.mktemp("run")
    with initialize_config_dir(CONFIG_DIR, version_base=None):
        cfg = compose(
            "config", overrides=reliability_overrides(tiny_corpus, cache_dir, "trainer.max_steps=2")
        )
    train(cfg, run_dir=run)
    return run / "checkpoints" / "last.ckpt"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "data.stride=8",
            r"cannot resume the data position: .*data\.stride: 16 in the checkpoint, 8 now",
        ),
        (
            "model.n_embd=64",
            r"the model differs from the checkpoint's \(model\.n_embd: 32 in the checkpoint, 64 now\)",
        ),
        ("model.n_layer=2", r".*model\.n_layer: 1 in the checkpoint, 2 now"),
    ],
)
def test_a_checkpoint_of_another_data_config_or_model_shape_is_refused_before_any_work(
    compose_tiny, checkpoint, tmp_path, override, message
):
    cache = tmp_path / "fresh-cache"
    cfg = compose_tiny(override, f"ckpt_path={checkpoint}", f"cache_dir={cache}")
    with pytest.raises(ConfigError, match=rf"^ckpt_path={checkpoint}: " + message):
        train(cfg)
    assert not cache.exists()  # refused before the tokenizer or a store was touched


def test_a_checkpoint_with_other_optimizer_groups_is_refused_pointing_at_init_from(
    compose_tiny, checkpoint, tmp_path
):
    """An older packlm's checkpoint (two unnamed param groups) fails in seconds, not in
    Lightning's optimizer restore after the data is built."""
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    state = saved["optimizer_states"][0]
    assert [g["name"] for g in state["param_groups"]] == ["matrices", "embedding", "vectors"]
    matrices, embedding, vectors = state["param_groups"]
    old = dict(matrices, params=matrices["params"] + embedding["params"])
    state["param_groups"] = [{k: v for k, v in g.items() if k != "name"} for g in (old, vectors)]
    older = tmp_path / "older.ckpt"
    torch.save(saved, older)
    cache = tmp_path / "fresh-cache"
    cfg = compose_tiny(f"ckpt_path={older}", f"cache_dir={cache}")
    with pytest.raises(
        ConfigError,
        match=rf"^ckpt_path={older}: its optimizer has the param groups \[None, None\].*init_from=",
    ):
        train(cfg)
    assert not cache.exists()


def test_a_checkpoint_of_another_tokenizer_is_refused_naming_vocab_size(compose_tiny, checkpoint):
    cfg = compose_tiny("tokenizer.vocab_size=290", f"ckpt_path={checkpoint}")
    with pytest.raises(ConfigError, match=r"model\.vocab_size: 300 in the checkpoint, 290 now"):
        train(cfg)


def test_a_checkpoint_of_another_corpus_is_refused_naming_the_store(
    compose_tiny, checkpoint, tiny_corpus, tmp_path
):
    extra = corpus_with(tmp_path, tiny_corpus, "more.txt", b"one more document of words.\n")
    cfg = compose_tiny(
        f"data.sources=[{extra}/*.txt]", "tokenizer.path=" + str(_tokenizer_dir(checkpoint)),
        f"ckpt_path={checkpoint}", "trainer.max_steps=3",
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"cannot resume the data position: .*store: "):
        train(cfg)


def _tokenizer_dir(checkpoint: Path) -> Path:
    """The trained tokenizer of the checkpoint's run, saved as a directory (same ids)."""
    from packlm.checkpoint.contents import tokenizer_from_checkpoint

    out = checkpoint.parent.parent / "tokenizer"
    if not out.exists():
        tokenizer_from_checkpoint(torch.load(checkpoint, weights_only=True)).save(out)
    return out


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("missing", r"ckpt_path=.*absent\.ckpt: no such checkpoint"),
        ("truncated", r"ckpt_path=.*broken\.ckpt: not a checkpoint \(not a torch zip archive"),
        ("foreign", r"ckpt_path=.*foreign\.ckpt: not a packlm training checkpoint"),
    ],
)
def test_a_missing_corrupt_or_foreign_checkpoint_is_named(
    compose_tiny, checkpoint, tmp_path, damage, message
):
    if damage == "missing":
        path = tmp_path / "absent.ckpt"
    elif damage == "truncated":
        path = tmp_path / "broken.ckpt"
        path.write_bytes(checkpoint.read_bytes()[:1000])
    else:
        path = tmp_path / "foreign.ckpt"
        torch.save({"weights": torch.zeros(2)}, path)
    with pytest.raises((ConfigError, FileNotFoundError), match=message):
        train(compose_tiny(f"ckpt_path={path}"))


@pytest.mark.parametrize(
    ("which", "err", "message"),
    [
        (
            "run",
            errno.EACCES,
            r"the run directory \(hydra\.run\.dir\) .*/out is not writable \(Permission denied\)",
        ),
        ("cache", errno.EROFS, r"cache_dir .*/cache is not writable \(Read-only file system\)"),
        (
            "run",
            errno.ENOSPC,
            r"the run directory \(hydra\.run\.dir\) .*/out is not writable \(disk full\)",
        ),
    ],
)
def test_a_read_only_or_full_output_directory_fails_at_once_naming_it(
    compose_tiny, tmp_path, monkeypatch, which, err, message
):
    """As root chmod does not stop writes, so the refusal is simulated at the first write."""
    target = tmp_path / ("out" if which == "run" else "cache")
    real = run_folder.tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if Path(dir) == target:
            raise OSError(err, os.strerror(err), str(target))
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(run_folder.tempfile, "mkstemp", mkstemp)
    cfg = compose_tiny(f"cache_dir={tmp_path / 'cache'}")
    with pytest.raises(OSError, match=message) as e:
        train(cfg, run_dir=tmp_path / "out")
    assert e.value.errno == err
    assert not (tmp_path / "out" / "checkpoints").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_really_read_only_run_directory(compose_tiny, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o500)
    try:
        with pytest.raises(OSError, match=r"is not writable \(Permission denied\)"):
            train(compose_tiny(), run_dir=out)
    finally:
        out.chmod(0o700)
