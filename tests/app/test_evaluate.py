"""`python -m packlm.evaluate`: every token of the given files scored once, with the
checkpoint's tokenizer, and the same loss a direct forward gives."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from packlm.checkpoint.contents import KEY, run_dir_of
from packlm.commands.evaluate import evaluate, table_path
from packlm.errors import ConfigError
from packlm.model import fused
from packlm.model.lit_module import LitCausalLM
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator

SPECIALS = ["<|endoftext|>", "<|pad|>"]
DOCS = ["the cat sat on the mat.", "a dog ran in the park.", "birds sing at dawn, cats sleep."]


@pytest.fixture(scope="module")
def held_out(tmp_path_factory):
    """(checkpoint, folder of the held-out files, tokenizer, model)."""
    root = tmp_path_factory.mktemp("evaluate")
    tok = Tokenizer(*train_bpe_from_iterator(DOCS * 3, 300, SPECIALS, num_workers=1), SPECIALS)
    torch.manual_seed(0)
    module = LitCausalLM(model=dict(vocab_size=tok.vocab_size, context_length=32, n_layer=1,
                                    n_head=2, n_embd=32))  # fmt: skip
    ckpt = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
            KEY: {"tokenizer": tok.__getstate__(), "data": {"window": 32, "packing": "none"}}}  # fmt: skip
    torch.save(ckpt, root / "last.ckpt")
    (root / "texts").mkdir()
    for i, text in enumerate(DOCS):
        (root / "texts" / f"{i}.txt").write_text(text, encoding="utf-8")
    return root / "last.ckpt", root / "texts", tok, module.eval()


@pytest.mark.parametrize("head", ["logits", "chunked"])
@pytest.mark.parametrize("packing", ["none", "document"])
def test_loss_is_the_direct_forwards(held_out, tmp_path, packing, head, monkeypatch):
    """Through either path of the loss: whole logits, or the head and CE in row chunks (what
    a CPU takes for large logits)."""
    monkeypatch.setattr(fused, "CE_CHUNKED_FROM", 0 if head == "chunked" else 2**62)
    ckpt, texts, tok, module = held_out
    result = evaluate(ckpt, {"val_sources": [f"{texts}/*.txt"], "packing": packing}, tmp_path)
    eos = tok.special_token_ids["<|endoftext|>"]
    nats, targets, n_bytes = 0.0, 0, 0
    with torch.no_grad():
        for text in DOCS:  # each document alone, all of it in one window (window 32)
            ids = torch.tensor([tok.encode(text) + [eos]])  # [1, n]
            nats += F.cross_entropy(module(ids[:, :-1])[0], ids[0, 1:], reduction="sum").item()
            targets += ids.shape[1] - 1
            n_bytes += len(text.encode()) - len(tok.token_bytes(int(ids[0, 0])))
    assert result["documents"] == 3 and result["supervised_tokens"] == targets
    assert result["tokens"] == targets + 3
    assert result["loss"] == pytest.approx(nats / targets, rel=1e-5)
    assert result["bytes"] == n_bytes
    assert result["bpb"] == pytest.approx(nats / n_bytes / 0.6931471805599453, rel=1e-5)


def test_command_prints_json(held_out, tmp_path):
    ckpt, texts, _, _ = held_out
    out = subprocess.run(
        [sys.executable, "-m", "packlm.evaluate", f"ckpt_path={ckpt}",
         f"data.val_sources=[{texts}/0.txt]", "data.window=4", f"cache_dir={tmp_path}",
         "per_document=true"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["documents"], result["window"], result["packing"]) == (1, 4, "none")
    assert result["supervised_tokens"] == result["tokens"] - 1 and result["windows"] >= 2
    assert "scoring" in out.stderr  # the progress bar
    assert f"scoring data.val_sources=['{texts}/0.txt'] (given)" in out.stderr
    assert "loss: the per-document score, not the run's validation-window loss" in out.stderr
    # in the checkpoint's run folder, not the working directory (a repository's root)
    written = run_dir_of(ckpt) / "per_document.csv"
    assert result["per_document"]["csv"] == str(written) and written.parent != tmp_path
    assert f"per-document losses (hardest first): {written}" in out.stderr
    assert len(read_csv(written)) == 1 and not (tmp_path / "per_document.csv").exists()
    table = dict(line.rsplit(None, 1) for line in out.stderr.splitlines()[-10:-2])
    assert table["bits per byte"] == f"{result['bpb']:.4f}"
    assert table["supervised"] == f"{result['supervised_tokens']:,}"


def test_needs_files_to_score(held_out, tmp_path):
    ckpt, _, _, _ = held_out
    with pytest.raises(ConfigError, match="data.val_sources"):
        evaluate(ckpt, {"val_sources": None}, tmp_path)
    with pytest.raises(ValueError, match=r"data.val_sources\[0\]=.*missing.txt"):
        evaluate(ckpt, {"val_sources": [str(tmp_path / "missing.txt")]}, tmp_path)


def read_csv(path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("window", [32, 8])  # 8: the longest document fills a row (T+1)
def test_per_document_losses_are_the_direct_forwards_and_add_up_to_the_total(
    held_out, tmp_path, window
):
    ckpt, texts, tok, module = held_out
    keys = {"val_sources": [f"{texts}/*.txt"], "window": window}
    result = evaluate(ckpt, keys, tmp_path, per_document_path=tmp_path / "docs.csv")
    rows = read_csv(result["per_document"]["csv"])
    assert sorted(int(r["document"]) for r in rows) == list(range(result["documents"]))
    losses = [float(r["loss"]) for r in rows]
    assert losses == sorted(losses, reverse=True)  # hardest first
    assert [int(r["rank"]) for r in rows] == [1, 2, 3]
    targets = [int(r["supervised"]) for r in rows]
    assert sum(targets) == result["supervised_tokens"]
    total = sum(x * n for x, n in zip(losses, targets, strict=True)) / sum(targets)
    assert total == pytest.approx(result["loss"], rel=1e-6)
    eos = tok.special_token_ids["<|endoftext|>"]
    with torch.no_grad():
        for r in rows:  # each document alone, in one window of the model's 32
            text = DOCS[int(r["path"].rsplit("/", 1)[-1].split(".")[0])]
            ids = torch.tensor([tok.encode(text) + [eos]])  # [1, n]
            direct = F.cross_entropy(module(ids[:, :-1])[0], ids[0, 1:]).item()
            assert float(r["loss"]) == pytest.approx(direct, rel=1e-5)
            assert int(r["tokens"]) == ids.shape[1] and int(r["supervised"]) == ids.shape[1] - 1
            assert r["source"] and r["doc_id"].endswith(r["path"])


def test_the_parquet_table_equals_the_csv(held_out, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet", reason='pip install "packlm[arrow]"')
    ckpt, texts, _, _ = held_out
    keys = {"val_sources": [f"{texts}/*.txt"], "window": 8}
    written = evaluate(ckpt, keys, tmp_path, per_document_path=tmp_path / "t.csv")["per_document"]
    assert written["parquet"] == str(tmp_path / "t.parquet") and written["note"] is None
    types = {f.name: str(f.type) for f in pq.read_schema(written["parquet"])}
    assert types["record"] == types["supervised"] == "int64" and types["loss"] == "double"
    table = pq.read_table(written["parquet"]).to_pylist()
    rows = read_csv(written["csv"])
    assert [list(r) for r in table] == [list(r) for r in rows]  # the same columns, in order
    for a, b in zip(table, rows, strict=True):
        assert {k: "" if v is None else str(v) for k, v in a.items()} == b


def test_without_pyarrow_only_the_csv_is_written_and_said_so(held_out, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    ckpt, texts, _, _ = held_out
    keys = {"val_sources": [f"{texts}/0.txt"]}
    written = evaluate(ckpt, keys, tmp_path, per_document_path=tmp_path / "t.csv")["per_document"]
    assert written["parquet"] is None and "pyarrow" in written["note"]
    assert len(read_csv(written["csv"])) == 1 and not (tmp_path / "t.parquet").exists()


def test_the_table_path_names_the_csv():
    assert table_path(False, None) is None
    assert table_path(True, None) == Path("per_document.csv")
    assert table_path(False, "out/t.csv") == Path("out/t.csv")  # a path turns the table on
    with pytest.raises(ConfigError, match=r"^per_document_path=x\.parquet: names the CSV"):
        table_path(True, "x.parquet")


def test_the_table_goes_to_the_checkpoints_run_folder(tmp_path):
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"")
    assert table_path(True, None, ckpt) == tmp_path / "run" / "per_document.csv"
    assert table_path(False, None, ckpt) is None
    assert table_path(True, "t.csv", ckpt) == Path("t.csv")  # a given path as given
    with pytest.raises(FileNotFoundError, match="no such checkpoint"):
        table_path(True, None, tmp_path / "absent.ckpt")


def test_windows_are_counted_without_rows_of_pad_and_any_batch_size_scores_the_same(
    held_out, tmp_path
):
    """Issue #59, family 3: `data.batch_size=10**12` (all in one batch) allocated 10**12 rows
    (a 7.28 TiB traceback); and rows of PAD filling the last batch were counted as windows
    (16 for these 3 documents at the default batch size)."""
    ckpt, texts, _, _ = held_out
    data = {"val_sources": [f"{texts}/*.txt"], "packing": "none"}
    results = [evaluate(ckpt, {**data, "batch_size": b}, tmp_path) for b in (16, 10**12, 2, 1)]
    assert {r["windows"] for r in results} == {3}
    assert {r["supervised_tokens"] for r in results} == {results[0]["supervised_tokens"]}
    assert [r["loss"] for r in results] == pytest.approx([results[0]["loss"]] * 4, rel=1e-6)
