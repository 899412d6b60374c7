"""format=nanogpt and format=megatron: the files other trainers read hold packlm's documents."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from packlm.commands.export.megatron import export_megatron
from packlm.commands.export.nanogpt import export_nanogpt
from packlm.config.schema import CONFIG_DIR
from packlm.data.store.token_store import TokenStore, write_store
from packlm.tokenizer import Tokenizer

MEGATRON_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64,
                   6: np.float64, 7: np.float32, 8: np.uint16}  # fmt: skip


def read_megatron(prefix: Path) -> list[np.ndarray]:
    """Documents of a Megatron indexed dataset, read from the published layout
    (megatron/core/datasets/indexed_dataset.py), independently of packlm's writer."""
    idx = prefix.with_suffix(".idx").read_bytes()
    assert idx[:9] == b"MMIDIDX\x00\x00"
    version, code = int.from_bytes(idx[9:17], "little"), idx[17]
    n_seq, n_doc = int.from_bytes(idx[18:26], "little"), int.from_bytes(idx[26:34], "little")
    assert version == 1
    pos = 34
    lengths = np.frombuffer(idx, np.int32, n_seq, pos)
    pointers = np.frombuffer(idx, np.int64, n_seq, pos + 4 * n_seq)
    doc_index = np.frombuffer(idx, np.int64, n_doc, pos + 12 * n_seq)
    assert len(idx) == pos + 12 * n_seq + 8 * n_doc
    dtype = np.dtype(MEGATRON_DTYPES[code])
    data = np.fromfile(prefix.with_suffix(".bin"), dtype=dtype)
    seqs = [
        data[p // dtype.itemsize : p // dtype.itemsize + n]
        for p, n in zip(pointers, lengths, strict=True)
    ]
    return [np.concatenate(seqs[a:b]) for a, b in zip(doc_index[:-1], doc_index[1:], strict=True)]


def documents(store: TokenStore) -> list[np.ndarray]:
    return [np.asarray(store.document(d)) for d in range(store.n_docs)]


def run_export(*overrides: str) -> dict:
    from packlm.commands.export.__main__ import export

    with initialize_config_dir(CONFIG_DIR, version_base=None):
        return export(compose("export", overrides=list(overrides)))


@pytest.fixture(scope="module")
def exported(tiny_corpus, tiny_ckpt, tmp_path_factory):
    """Both formats exported from the tiny corpus with the checkpoint's tokenizer."""
    ckpt, _ = tiny_ckpt
    root = tmp_path_factory.mktemp("exports")
    common = [f"ckpt_path={ckpt}", f"data.sources=[{tiny_corpus}/*.txt]", "data.val_fraction=0.2",
              f"cache_dir={root / 'cache'}"]  # fmt: skip
    for fmt in ("nanogpt", "megatron"):
        run_export(f"format={fmt}", f"out={root / fmt}", *common)
    stores = sorted((root / "cache" / "stores").glob("*/train"))
    assert len(stores) == 1
    return root, {s: TokenStore.open(stores[0].parent / s) for s in ("train", "val")}


def test_nanogpt_files_are_read_by_nanogpts_loader(exported, tiny_tokenizer):
    root, stores = exported
    meta = pickle.loads((root / "nanogpt" / "meta.pkl").read_bytes())
    assert meta["vocab_size"] == tiny_tokenizer.vocab_size and meta["dtype"] == "uint16"
    eos = tiny_tokenizer.special_token_ids["<|endoftext|>"]
    for split, store in stores.items():
        data = np.memmap(
            root / "nanogpt" / f"{split}.bin", dtype=np.uint16, mode="r"
        )  # nanoGPT's line
        assert store.n_docs > 0 and len(data) == store.n_tokens
        assert np.array_equal(data, np.concatenate(documents(store)))
        assert (data == eos).sum() == store.n_docs
    text = tiny_tokenizer.decode(np.asarray(data[: store.doc_offsets[1]]))
    assert text.endswith(".\n<|endoftext|>")
    again = Tokenizer(**meta["packlm_tokenizer"])
    assert again.digest() == tiny_tokenizer.digest()
    assert meta["stoi"]["a"] == tiny_tokenizer.encode("a")[0]


def test_megatron_documents_are_packlms(exported):
    root, stores = exported
    for split, store in stores.items():
        docs = read_megatron(root / "megatron" / split)
        assert len(docs) == store.n_docs
        assert all(np.array_equal(a, b) for a, b in zip(docs, documents(store), strict=True))
        assert (root / "megatron" / f"{split}.idx").read_bytes()[17] == 8  # uint16


@pytest.fixture(scope="module")
def big_vocab_tokenizer() -> Tokenizer:
    """65,794 ids: every byte pair is a merge, so ids need more than 16 bits."""
    vocab = {0: b"<|endoftext|>", 1: b"<|pad|>", **{2 + b: bytes([b]) for b in range(256)}}
    merges = [(bytes([a]), bytes([b])) for a in range(256) for b in range(256)]
    vocab.update({258 + k: a + b for k, (a, b) in enumerate(merges)})
    return Tokenizer(vocab, merges, ["<|endoftext|>", "<|pad|>"])


def test_big_vocabularies_get_wider_ids(tmp_path, big_vocab_tokenizer):
    tok = big_vocab_tokenizer
    docs = [np.array([65793, 300, 0]), np.array([*tok.encode_ordinary("zz top"), 0]), np.array([0])]
    stores = {"train": write_store(tmp_path / "train", docs, tok.vocab_size, 0, 1),
              "val": write_store(tmp_path / "val", docs[:1], tok.vocab_size, 0, 1)}  # fmt: skip
    (tmp_path / "ng").mkdir(), (tmp_path / "mg").mkdir()
    notes = export_nanogpt(stores, tok, tmp_path / "ng")
    assert any("uint32" in n for n in notes)
    data = np.memmap(tmp_path / "ng" / "train.bin", dtype=np.uint32, mode="r")
    assert np.array_equal(data, np.concatenate(docs))
    assert pickle.loads((tmp_path / "ng" / "meta.pkl").read_bytes())["dtype"] == "uint32"
    export_megatron(stores, tok, tmp_path / "mg")
    assert (tmp_path / "mg" / "train.idx").read_bytes()[17] == 4  # int32
    assert all(
        np.array_equal(a, b)
        for a, b in zip(read_megatron(tmp_path / "mg" / "train"), docs, strict=True)
    )
