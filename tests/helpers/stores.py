"""Small corpora of every source kind in a directory, built into stores and decoded back."""

from __future__ import annotations

import json
from pathlib import Path

from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.prepared import PreparedData, prepare_stores

VOCAB = 300


def write_corpus(root: Path, n: int = 40) -> list[str]:
    """Two text files split on a blank line and one JSONL file; returns every document's text."""
    root.mkdir(parents=True, exist_ok=True)
    texts_a = [f"Paragraph {i}: the quick brown fox, {i * 7} jumps.\nline two" for i in range(n)]
    texts_a[3] = "a special string <|endoftext|> inside, and <|pad|> too"
    texts_b = [f"déjà vu №{i} — ünïcode {'x' * (i % 5)}" for i in range(n // 2)]
    records = [f'record {i}\nwith {{json}} "quotes"' for i in range(n // 2)]
    (root / "a.txt").write_text("\n\n".join(texts_a), encoding="utf-8")
    (root / "b.txt").write_text("\n\n".join(texts_b), encoding="utf-8")
    (root / "c.jsonl").write_text(
        "".join(json.dumps({"text": t}) + "\n" for t in records), encoding="utf-8"
    )
    return texts_a + texts_b + records


def data_config(root: Path, **overrides) -> DataConfig:
    values = {
        "sources": [str(root / "*.txt"), str(root / "c.jsonl")],
        "separator": "\n\n",
        "val_fraction": 0.25,
    }
    values.update(overrides)
    return DataConfig(**values)


def prepare(
    root: Path, cache: Path, tokenizer: TokenizerConfig | None = None, **overrides
) -> PreparedData:
    tokenizer = tokenizer or TokenizerConfig(vocab_size=VOCAB)
    return prepare_stores(data_config(root, **overrides), tokenizer, cache, progress=False)


def decoded(prepared: PreparedData, split: str) -> list[str]:
    """Each document's text; asserts every document ends with exactly one EOS."""
    store = prepared.open(split)
    texts = []
    for d in range(store.n_docs):
        ids = store.document(d).tolist()
        assert ids[-1] == store.eos_id and store.eos_id not in ids[:-1], store.doc_id(d)
        texts.append(prepared.tokenizer.decode(ids[:-1]))
    return texts


def documents(prepared: PreparedData) -> int:
    return (
        prepared.train_manifest["counts"]["documents"]
        + prepared.val_manifest["counts"]["documents"]
    )


def prepare_tiny(corpus: Path, cache: Path, num_workers: int = 0) -> PreparedData:
    """The tiny corpus (tests/helpers/corpus.py) prepared in-process, 20% validation."""
    return prepare_stores(
        DataConfig(sources=[f"{corpus}/*.txt"], val_fraction=0.2),
        TokenizerConfig(vocab_size=300),
        cache,
        progress=False,
        num_workers=num_workers,
    )


PLAN_ARRAYS = ("order", "anchors", "seq_first", "offsets", "window_cum", "sample_order")


def assert_same_plans_and_batches(one: PreparedData, other: PreparedData, cache: Path, **keys):
    """Two prepared corpora (one store, its shards) give the same epoch plans (epochs 0 and 1,
    and validation's windows) and every training batch, under the data config `keys`."""
    import numpy as np

    from packlm.data.datamodule import PackedDataModule

    keys = dict(keys, batch_size=4, num_workers=0, seed=3)
    a = PackedDataModule(prepared=one, cache_dir=cache, **keys)
    b = PackedDataModule(prepared=other, cache_dir=cache, **keys)
    for epoch in (0, 1):
        pa, pb = a.plan(epoch), b.plan(epoch)
        assert pa.n_samples == pb.n_samples > 0
        for name in PLAN_ARRAYS:
            x, y = getattr(pa, name), getattr(pb, name)
            assert (x is None) == (y is None), name
            if x is not None:
                np.testing.assert_array_equal(x, y, err_msg=name)
    np.testing.assert_array_equal(a.plan(0, "val").window_cum, b.plan(0, "val").window_cum)
    for x, y in zip(a.train_dataloader(), b.train_dataloader(), strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert np.array_equal(np.asarray(x[k]), np.asarray(y[k])), k
