"""The cache around the stores: reuse, invalidation with a reason, damage, kills, and the CLI."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers.stores import VOCAB, data_config, decoded, prepare, write_corpus
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.store.token_store import StoreError, TokenStore

SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.fixture
def corpus(tmp_path) -> Path:
    write_corpus(tmp_path / "src")
    return tmp_path / "src"


def built(caplog) -> list[str]:
    """The 'building'/'training' log lines since the last clear."""
    lines = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith(("packlm.data", "packlm.tokenizer"))
    ]
    caplog.clear()
    return [m for m in lines if m.startswith(("building", "training"))]


def test_second_call_reuses_tokenizer_and_stores(corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    first = prepare(corpus, tmp_path / "cache")
    assert [m.split()[0] for m in built(caplog)] == ["training", "building"]
    stamp = os.stat(first.train_dir / "tokens.bin").st_mtime_ns
    again = prepare(
        corpus, tmp_path / "cache", window=64, stride=32, packing="stream"
    )  # plan-only keys
    assert built(caplog) == []
    assert again.train_dir == first.train_dir and again.manifests == first.manifests
    assert os.stat(first.train_dir / "tokens.bin").st_mtime_ns == stamp


def test_a_changed_source_rebuilds_and_says_which(corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    first = prepare(corpus, tmp_path / "cache")
    (corpus / "b.txt").write_text("replaced content\n\nentirely new", encoding="utf-8")
    caplog.clear()
    second = prepare(corpus, tmp_path / "cache")
    name = str(corpus / "*.txt")
    tokenizer_line, store_line = built(caplog)
    assert (
        tokenizer_line.startswith("training the tokenizer")
        and f"source {name!r} changed" in tokenizer_line
    )
    assert (
        store_line.startswith("building token stores") and f"source {name!r} changed" in store_line
    )
    assert second.train_dir != first.train_dir
    assert "entirely new" in decoded(second, "train") + decoded(second, "val")
    assert TokenStore.open(first.train_dir).n_docs == first.train_manifest["counts"]["documents"]


def test_a_changed_option_rebuilds_and_names_it_but_a_weight_does_not(corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    prepare(corpus, tmp_path / "cache")
    caplog.clear()
    prepare(corpus, tmp_path / "cache", separator="\n")
    assert all("data.separator: '\\n\\n' -> '\\n'" in m for m in built(caplog))
    weighted = [str(corpus / "*.txt"), {"path": str(corpus / "c.jsonl"), "weight": 2.5}]
    prepared = prepare(corpus, tmp_path / "cache", separator="\n", sources=weighted)
    assert built(caplog) == []  # weights are applied by the epoch plan, not the store
    assert prepared.train_manifest["sources"][1]["name"] == str(corpus / "c.jsonl")
    assert "weight" not in prepared.train_manifest["sources"][1]


def test_a_changed_tokenizer_option_retrains_and_rebuilds(corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    first = prepare(corpus, tmp_path / "cache")
    caplog.clear()
    second = prepare(corpus, tmp_path / "cache", TokenizerConfig(vocab_size=VOCAB + 20))
    tokenizer_line, store_line = built(caplog)
    assert tokenizer_line.startswith(
        f"training the tokenizer (tokenizer.vocab_size: {VOCAB} -> {VOCAB + 20}) into "
    )
    # The store line says what changed in words first; digests come short, the path last.
    old, new = first.tokenizer.digest()[:12], second.tokenizer.digest()[:12]
    assert store_line.startswith(
        f"building token stores (a different tokenizer (digest {old} -> {new})) in "
    )
    assert not re.search(r"[0-9a-f]{64}", store_line.split(" in ")[0])
    assert decoded(second, "train") == decoded(first, "train")
    # Both configurations stay cached side by side (a sweep does not thrash the cache).
    prepare(corpus, tmp_path / "cache")
    assert built(caplog) == []


def test_a_truncated_store_is_detected_and_rebuilt(corpus, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    first = prepare(corpus, tmp_path / "cache")
    expected = np.array(first.open("val").tokens)
    tokens = first.val_dir / "tokens.bin"
    os.truncate(tokens, tokens.stat().st_size - 2)
    with pytest.raises(StoreError, match="truncated"):
        TokenStore.open(first.val_dir)
    caplog.clear()
    again = prepare(corpus, tmp_path / "cache")
    (store_line,) = built(caplog)
    assert "damaged" in store_line and "tokens.bin" in store_line and "truncated" in store_line
    assert np.array_equal(again.open("val").tokens, expected)


CHILD = """
import os, signal, sys
from packlm.data.store import token_store as store
from packlm.config.data import DataConfig
from packlm.data.store.prepared import prepare_stores
from packlm.config.tokenizer import TokenizerConfig

finished = []
original = store.StoreWriter.finish

def finish_then_die(self, manifest):
    finished.append(self.path)
    if len(finished) == 2:  # the train store is complete, the val store is not
        os.kill(os.getpid(), signal.SIGKILL)
    return original(self, manifest)

store.StoreWriter.finish = finish_then_die
config = DataConfig(sources=sys.argv[1:3], separator="\\n\\n", val_fraction=0.25)
prepare_stores(config, TokenizerConfig(vocab_size=int(sys.argv[4])), sys.argv[3], progress=False)
"""


def test_a_killed_build_is_never_read_and_the_next_run_completes_it(corpus, tmp_path, caplog):
    cache = tmp_path / "cache"
    sources = data_config(corpus).sources
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), *sources, str(cache), str(VOCAB)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -9, child.stderr
    assert [p.name for p in (cache / "stores").iterdir() if not p.name.startswith(".")] == []
    assert any(".tmp-" in p.name for p in (cache / "stores").iterdir())  # the partial build
    caplog.set_level(logging.INFO)
    prepared = prepare(corpus, cache)
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("removing") and "interrupted build" in m for m in messages)
    assert [p.name for p in (cache / "stores").iterdir() if ".tmp-" in p.name] == []
    clean = prepare(corpus, tmp_path / "clean")
    assert np.array_equal(prepared.open("train").tokens, clean.open("train").tokens)
    assert np.array_equal(prepared.open("val").tokens, clean.open("val").tokens)


def test_cli_builds_both_stores_and_prints_the_manifests(corpus, tmp_path):
    cache = tmp_path / "cache"
    args = [
        sys.executable,
        "-m",
        "packlm.prepare",
        f"data.sources=[{corpus}/*.txt,{corpus}/c.jsonl]",
        "data.separator='\n\n'",
        f"tokenizer.vocab_size={VOCAB}",
        f"cache_dir={cache}",
        f"hydra.run.dir={tmp_path}/run",
    ]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert Path(report["tokenizer"]).parent == cache / "tokenizers"
    for split in ("train", "val"):
        store = TokenStore.open(report[split]["path"])
        assert report[split]["counts"]["documents"] == store.n_docs > 0
        assert report[split]["fingerprint"]["data.separator"] == "\n\n"
