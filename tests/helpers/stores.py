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
