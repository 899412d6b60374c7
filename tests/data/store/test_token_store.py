"""StoreWriter and TokenStore: batched appends, atomic replacement, damage detection."""

from __future__ import annotations

import numpy as np
import pytest

from packlm.data.store.token_store import (
    StoreError,
    StoreWriter,
    TokenStore,
    token_dtype,
    write_store,
)
from packlm.data.store.verify import verify_files

HEADER = {
    "eos_id": 0,
    "pad_id": 1,
    "sources": [{"name": "m", "weight": 1.0}],
    "fingerprint": {},
    "counts": {},
}


def test_add_many_equals_add_one_by_one(tmp_path):
    docs = [np.array([5, 6, 0]), np.array([0]), np.array([7, 8, 9, 10, 0])]
    one = write_store(
        tmp_path / "one",
        docs,
        vocab_size=11,
        eos_id=0,
        pad_id=1,
        doc_sources=[0, 1, 0],
        source_names=["a", "b"],
    )
    with StoreWriter(tmp_path / "many", vocab_size=11) as w:
        w.add_many(
            np.concatenate(docs[:2]), np.array([3, 1]), ["memory:0", "memory:1"], np.array([0, 1])
        )
        w.add_many(docs[2], np.array([5]), ["memory:2"], np.array([0]))
        assert (w.n_docs, w.n_tokens) == (3, 9)
        many = w.finish(
            {**HEADER, "sources": [{"name": "a", "weight": 1.0}, {"name": "b", "weight": 1.0}]}
        )
    for store in (one, many):
        assert store.doc_offsets.tolist() == [0, 3, 4, 9]
        assert store.doc_sources.tolist() == [0, 1, 0] and store.doc_sources.dtype == np.int32
        assert [store.document(d).tolist() for d in range(3)] == [d.tolist() for d in docs]
        assert store.doc_id(2) == "memory:2" and store.manifest["counts"]["tokens"] == 9
    assert np.array_equal(one.tokens, many.tokens)


def test_bad_batches_are_refused(tmp_path):
    with StoreWriter(tmp_path / "s", vocab_size=10) as w:
        with pytest.raises(StoreError, match="lengths do not match"):
            w.add_many(np.array([1, 2, 3]), np.array([2]), ["x"], np.array([0]))
        with pytest.raises(StoreError, match="id 10 >= vocab 10"):
            w.add_many(np.array([10]), np.array([1]), ["y"], np.array([0]))


def test_an_unfinished_writer_changes_nothing_at_its_path(tmp_path):
    old = write_store(tmp_path / "s", [np.array([3, 0])], vocab_size=5, eos_id=0, pad_id=1)
    with pytest.raises(RuntimeError), StoreWriter(tmp_path / "s", vocab_size=5) as w:
        w.add(np.array([4, 4, 0]), "new")
        raise RuntimeError("killed halfway")
    assert TokenStore.open(tmp_path / "s").tokens.tolist() == old.tokens.tolist() == [3, 0]
    assert [p.name for p in tmp_path.iterdir()] == ["s"]


def test_truncated_or_missing_files_are_detected(tmp_path):
    store = write_store(tmp_path / "s", [np.array([3, 4, 0])] * 4, vocab_size=5, eos_id=0, pad_id=1)
    assert verify_files(store.path, store.manifest) is None
    with open(store.path / "tokens.bin", "r+b") as f:
        f.truncate(4)
    with pytest.raises(StoreError, match=r"tokens\.bin: 4 bytes, manifest says 24 \(truncated"):
        TokenStore.open(store.path)
    (store.path / "doc_ids.txt").unlink()
    assert "doc_ids.txt: missing" in verify_files(store.path, store.manifest)


def test_token_dtype_fits_the_vocab():
    assert token_dtype(2**16) == np.uint16 and token_dtype(2**16 + 1) == np.uint32


def _edit_manifest(path, edit) -> None:
    import json

    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    edit(manifest)
    manifest_path.write_text(json.dumps(manifest))


def _store(tmp_path):
    docs = [np.array([5, 6, 0]), np.array([7, 0]), np.array([8, 9, 10, 0])]
    return write_store(tmp_path / "s", docs, vocab_size=11, eos_id=0, pad_id=1).path


@pytest.mark.parametrize("delta", [+5, -2, -10])
def test_an_edited_token_count_is_detected_by_the_manifest_checksum(tmp_path, delta):
    path = _store(tmp_path)
    _edit_manifest(path, lambda m: m["counts"].update(tokens=m["counts"]["tokens"] + delta))
    with pytest.raises(StoreError, match=r"manifest\.json: edited since it was written"):
        TokenStore.open(path)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda m: m["counts"].update(tokens=m["counts"]["tokens"] + 5),
            "counts.tokens=14 does not match tokens.bin",
        ),
        (lambda m: m["counts"].update(tokens=m["counts"]["tokens"] - 10), "counts.tokens=-1"),
        (
            lambda m: m["counts"].update(documents=2),
            "doc_offsets.npy: 3 documents, manifest says 2",
        ),
        (lambda m: m["counts"].pop("tokens"), "incomplete manifest"),
    ],
)
def test_an_old_manifest_without_its_checksum_is_checked_against_the_files(tmp_path, edit, message):
    """A manifest without a checksum of its own (written before it existed, or whose
    checksum an editor removed): its counts must agree with the files' sizes and offsets."""
    path = _store(tmp_path)
    _edit_manifest(path, lambda m: (m.pop("manifest_checksum"), edit(m)))
    with pytest.raises(StoreError, match=message):
        TokenStore.open(path)


def test_offsets_that_disagree_with_the_token_count_are_detected(tmp_path):
    """Both the recorded sizes and counts.tokens edited consistently: the offsets still say no."""
    path = _store(tmp_path)

    def edit(m):
        m.pop("manifest_checksum")
        m["counts"]["tokens"] -= 1
        m["files"]["tokens.bin"] -= 2
        m.pop("checksums")

    _edit_manifest(path, edit)
    with open(path / "tokens.bin", "r+b") as f:
        f.truncate(f.seek(0, 2) - 2)
    with pytest.raises(StoreError, match="doc_offsets.npy: ends at token 9, manifest says 8"):
        TokenStore.open(path)


def test_an_untouched_store_with_its_manifest_checksum_opens(tmp_path):
    store = TokenStore.open(_store(tmp_path))
    assert store.n_tokens == 9 and "manifest_checksum" in store.manifest
