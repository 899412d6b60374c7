"""Bad data inputs of issue #33 (docs/reliability.md's catalogue): a NUL-filled tail, a source
listed twice, a full cache_dir, an empty file to evaluate, a JSON array where JSON lines are
expected, a record without the text field, Ctrl-C during prepare."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from packlm.data.store.layout import write_npy
from packlm.data.store.sources import (
    ReadCounts,
    ReadOptions,
    SourceError,
    iter_documents,
    resolve_sources,
)
from packlm.errors import ConfigError

TEXT = "a line of ordinary text, the head of the file.\n" * 40


def read(entries, **options) -> tuple[list[str], ReadCounts]:
    counts = ReadCounts()
    docs = iter_documents(resolve_sources(entries), ReadOptions(**options), counts)
    return [d.text for d in docs], counts


# --- a NUL-filled tail ------------------------------------------------------------------------


@pytest.mark.parametrize("separator", [None, "\n\n"])
def test_a_text_file_with_a_nul_tail_is_refused_alone_and_skipped_and_counted_in_a_walk(
    tmp_path, separator
):
    """Before: only the first 8 KiB are sniffed, so the head and 100 KB of NUL bytes (valid
    UTF-8) were tokenized as one text document."""
    root = tmp_path / "src"
    root.mkdir()
    (root / "good.txt").write_text("fine text", encoding="utf-8")
    cut = root / "cut.txt"
    head = (TEXT * 5).encode()  # past the sniffed block
    cut.write_bytes(head + bytes(100_000))
    with pytest.raises(SourceError, match=f"^{cut}: binary data at byte offset {len(head)} "):
        read([str(cut)], separator=separator)
    texts, counts = read([str(root)], separator=separator)
    assert "fine text" in texts and counts.dropped()["binary"] == 1
    assert not any("\x00" in t for t in texts)


def test_a_jsonl_file_with_a_nul_tail_is_binary_not_bad_json(tmp_path):
    src = tmp_path / "r.jsonl"
    src.write_bytes(b"".join(b'{"text": "record %d"}\n' % i for i in range(400)) + bytes(50_000))
    with pytest.raises(SourceError, match=f"^{src}: binary data at byte offset"):
        read([str(src)])


# --- a source listed twice --------------------------------------------------------------------


def test_a_source_listed_twice_is_refused_naming_both_entries(tmp_path):
    """Before: its documents were read and counted twice without a word."""
    a = tmp_path / "a.txt"
    a.write_text(TEXT, encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        resolve_sources([str(a), str(a)])
    assert str(e.value).startswith(f"data.sources[0]={str(a)!r} and data.sources[1]={str(a)!r}")
    assert "counted twice" in str(e.value) and "weight" in str(e.value)
    with pytest.raises(ConfigError, match=r"data.val_sources\[0\]=.* and data.val_sources\[1\]"):
        resolve_sources([str(tmp_path / "*.txt"), {"path": str(a)}], "data.val_sources")
    with pytest.raises(ConfigError, match="here weights 1 and 3"):
        resolve_sources([str(a), {"path": str(a), "weight": 3}])
    halves = [{"path": str(a), "span": [0, 0.5]}, {"path": str(a), "span": [0.5, 1]}]
    assert len(resolve_sources(halves)) == 2  # disjoint spans of one file are fine
    with pytest.raises(ConfigError, match="both read"):
        resolve_sources([{"path": str(a), "span": [0, 0.6]}, {"path": str(a), "span": [0.5, 1]}])


# --- a full cache_dir -------------------------------------------------------------------------


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs with about 20 KiB free (skipped where mounting is not allowed)."""
    root = tmp_path / "disk"
    root.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(root)],
                             capture_output=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()})")
    try:
        (root / "filler").write_bytes(bytes(shutil.disk_usage(root).free - (20 << 10)))
        yield root
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)


def test_array_writes_on_a_full_disk_raise_enospc(full_disk):
    """Before: numpy's `tofile` reported the short write as `[Errno None] 100000 requested and
    29680 written`, so the store build's message had no "disk full"."""
    with pytest.raises(OSError) as e:
        write_npy(full_disk / "a.npy", np.arange(100_000))
    assert e.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as e, open(full_disk / "spill", "wb") as f:  # as encode.py
        write_npy(f, np.arange(100_000))
    assert e.value.errno == errno.ENOSPC


# --- JSON that is not JSON lines, a record without the field -----------------------------------


def test_a_json_array_is_named_not_json_lines(tmp_path):
    """Before: `no field 'text' (data.text_field) in this record`."""
    one_line = tmp_path / "one.json"
    one_line.write_text(json.dumps([{"text": "a"}, {"text": "b"}]), encoding="utf-8")
    with pytest.raises(SourceError, match=f"^{one_line}:1: a JSON array; not JSON lines"):
        read([str(one_line)])
    pretty = tmp_path / "pretty.json"
    pretty.write_text(json.dumps([{"text": "a"}, {"text": "b"}], indent=2), encoding="utf-8")
    with pytest.raises(SourceError, match=f"^{pretty}: not JSON lines \\(one JSON object per"):
        read([str(pretty)])


def test_a_record_without_the_text_field_lists_its_fields(tmp_path):
    src = tmp_path / "r.jsonl"
    src.write_text('{"text": "ok"}\n{"content": "x", "id": 3}\n', encoding="utf-8")
    with pytest.raises(SourceError) as e:
        read([str(src)])
    assert str(e.value) == (
        f"{src}:2: no field 'text' (data.text_field) in this record; it has 'content', 'id'"
    )


# --- evaluate on an empty file ----------------------------------------------------------------


def test_evaluate_on_an_empty_file_says_there_is_nothing_to_score(tmp_path):
    """Before: `no training documents (1 empty, ..., the rest sent to validation by
    data.val_fraction=0.0); ... hold out a part of it instead: data.sources=[...]`."""
    from packlm.checkpoint.contents import KEY
    from packlm.commands.evaluate import evaluate
    from packlm.model.lit_module import LitCausalLM
    from packlm.tokenizer import Tokenizer, train_bpe_from_iterator

    specials = ["<|endoftext|>", "<|pad|>"]
    tok = Tokenizer(*train_bpe_from_iterator(["the cat sat"] * 3, 260, specials, num_workers=1),
                    specials)  # fmt: skip
    module = LitCausalLM(model=dict(vocab_size=tok.vocab_size, context_length=16, n_layer=1,
                                    n_head=2, n_embd=16))  # fmt: skip
    ckpt = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
            KEY: {"tokenizer": tok.__getstate__(), "data": {"window": 16, "packing": "none"}}}  # fmt: skip
    torch.save(ckpt, tmp_path / "last.ckpt")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(SourceError) as e:
        evaluate(tmp_path / "last.ckpt", {"val_sources": [str(empty)]}, tmp_path / "cache")
    message = str(e.value)
    assert message.startswith(f"data.val_sources=[{str(empty)!r}]: no documents to score (1 empty")
    assert "val_fraction" not in message and "hold out" not in message


# --- Ctrl-C during prepare --------------------------------------------------------------------


def test_ctrl_c_during_prepare_prints_one_line_and_exits_130(tmp_path):
    """Before: 53 lines of KeyboardInterrupt traceback (exit 1)."""
    src = tmp_path / "big.txt"
    words = np.random.default_rng(0).integers(0, 5000, 400_000)
    src.write_text(" ".join(f"w{w}" for w in words), encoding="utf-8")  # seconds of training
    cache = tmp_path / "cache"
    args = [sys.executable, "-m", "packlm.prepare", f"data.sources=[{src}]",
            "data.val_fraction=0.1", "tokenizer.vocab_size=2000", f"cache_dir={cache}"]  # fmt: skip
    src_dir = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src_dir, os.environ.get("PYTHONPATH", "")])}
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env, cwd=tmp_path)  # fmt: skip
    lines = []
    for line in proc.stderr:  # wait until the tokenizer training has started
        lines.append(line)
        if "training the tokenizer" in line:
            break
    proc.send_signal(signal.SIGINT)
    _, tail = proc.communicate(timeout=120)
    err = "".join(lines) + tail
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert err.strip().splitlines()[-1].startswith("error: interrupted (Ctrl-C)"), err[-3000:]
    entries = [p.name for d in ("tokenizers", "stores") if (cache / d).exists()
               for p in (cache / d).iterdir() if not p.name.endswith(".lock")]  # fmt: skip
    assert entries == []  # no entry and no temporary left
