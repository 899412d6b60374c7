"""`evaluate per_document=true`: each document scored on its own context, whatever the run's
packing (a short one equals its forward alone, a long one its rolling-window loss); and,
without data.val_sources, evaluate scores the run's own validation split."""

from __future__ import annotations

import csv
import random
import shutil
from dataclasses import asdict

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from packlm.checkpoint.contents import KEY
from packlm.commands.evaluate import evaluate
from packlm.config.data import DataConfig
from packlm.errors import ConfigError
from packlm.evaluation.document_windows import document_rows
from packlm.model.lit_module import LitCausalLM
from packlm.tokenizer import Tokenizer, train_bpe_from_iterator

SPECIALS = ["<|endoftext|>", "<|pad|>"]
WINDOW = 16
WORDS = ["the", "cat", "sat", "on", "a", "mat", "while", "dogs", "ran", "far", "in", "green",
         "parks", "and", "birds", "sang", "at", "dawn"]  # fmt: skip


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(folder of short documents, the long document's file, tokenizer, model, a writer of
    checkpoints with a given data config)."""
    root = tmp_path_factory.mktemp("per_document")
    rng = random.Random(0)
    short = [sentence(rng, rng.randint(2, 6)) for _ in range(14)]
    long = sentence(rng, 60)
    tok = Tokenizer(*train_bpe_from_iterator(short + [long], 300, SPECIALS, num_workers=1),
                    SPECIALS)  # fmt: skip
    torch.manual_seed(0)
    module = LitCausalLM(model=dict(vocab_size=tok.vocab_size, context_length=2 * WINDOW,
                                    n_layer=2, n_head=2, n_embd=32))  # fmt: skip
    with torch.no_grad():  # sharper than the init: context changes the logits visibly
        for p in module.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.5)
    (root / "short").mkdir()
    for i, text in enumerate(short):
        (root / "short" / f"{i:02d}.txt").write_text(text, encoding="utf-8")
    (root / "long.txt").write_text(long, encoding="utf-8")

    def checkpoint(name: str, data: dict) -> str:
        ckpt = {"state_dict": module.state_dict(), "hyper_parameters": dict(module.hparams),
                KEY: {"tokenizer": tok.__getstate__(), "data": data}}  # fmt: skip
        torch.save(ckpt, root / name)
        return str(root / name)

    return root, tok, module.eval(), checkpoint


def ids_of(tok, text: str, bos: bool = False) -> list[int]:
    """A document as the plan reads it: its tokens and EOS, after the BOS (EOS) with bos."""
    eos = tok.special_token_ids["<|endoftext|>"]
    return [eos] * bos + tok.encode(text) + [eos]


def alone(module, ids: list[int]) -> torch.Tensor:
    """float64 [n-1]: the CE of each target of the document run alone in one forward."""
    x = torch.tensor([ids])  # [1, n]
    with torch.no_grad():
        return F.cross_entropy(module(x[:, :-1])[0], x[0, 1:], reduction="none").double()


def rolling(module, ids: list[int], window: int, stride: int) -> torch.Tensor:
    """float64 [n-1]: the CE of each target, written out as the perplexity guides do: windows
    of `window` inputs whose ends move `stride` targets on (the last one ends at the end),
    each scoring only the targets no earlier window scored."""
    n, out, done = len(ids), [], 0  # done: targets 1..done are scored
    end = window  # the last token a window reads
    while done < n - 1:
        end = min(end, n - 1)
        begin = end - window
        ce = alone(module, ids[begin : end + 1])  # targets begin+1..end
        out.append(ce[done - begin :])
        done, end = end, end + stride
    return torch.cat(out)


def rows_of(result) -> dict[str, dict[str, str]]:
    with open(result["per_document"]["csv"], newline="", encoding="utf-8") as f:
        return {r["path"].rsplit("/", 1)[-1]: r for r in csv.DictReader(f)}


@pytest.mark.parametrize(("packing", "bos"), [("document", False), ("stream", False),
                                              ("document", True)])  # fmt: skip
def test_short_documents_equal_each_document_alone_under_the_default_packing(
    run, tmp_path, packing, bos
):
    """The default packing (and stream's, and with data.bos): one stream of documents cut
    into validation windows, so documents straddle window edges."""
    root, tok, module, checkpoint = run
    data = {"window": WINDOW, "packing": packing, "bos": bos}
    ckpt = checkpoint(f"{packing}-{bos}.ckpt", data)
    keys = {"val_sources": [f"{root}/short/*.txt"]}
    lengths = {p.name: len(ids_of(tok, p.read_text(), bos)) for p in (root / "short").iterdir()}
    assert max(lengths.values()) <= WINDOW + 1 and sum(lengths.values()) > 4 * WINDOW
    said: list[str] = []
    result = evaluate(ckpt, keys, tmp_path, per_document_path=tmp_path / "d.csv", say=said.append)
    windows = evaluate(ckpt, keys, tmp_path, per_document_path=None)
    assert result["scoring"] == "documents" and windows["scoring"] == "validation windows"
    assert "per-document score, not the run's validation-window loss" in said[1]
    rows = rows_of(result)
    nats = 0.0
    for name, row in rows.items():
        ce = alone(module, ids_of(tok, (root / "short" / name).read_text(), bos))
        assert int(row["supervised"]) == len(ce) == lengths[name] - 1
        assert float(row["loss"]) == pytest.approx(ce.mean().item(), abs=1e-5, rel=1e-5)
        nats += ce.sum().item()
    across = len(rows) - 1 if packing == "stream" else 0  # a document's first token from EOS
    assert result["supervised_tokens"] + across == windows["supervised_tokens"]
    assert result["loss"] == pytest.approx(nats / result["supervised_tokens"], rel=1e-5)
    # in the run's packing (one stream, validation windows T apart) documents straddle a
    # window edge: their later targets were scored without the document's start
    ordered = sorted(rows.values(), key=lambda r: int(r["document"]))  # the stream's order
    sizes = np.array([int(r["tokens"]) for r in ordered])
    first = np.cumsum(sizes) - sizes  # [d] where each document starts in the stream
    last_window = (first + sizes - 2) // WINDOW * WINDOW  # start of its last target's window
    assert (last_window > first).sum() >= 3


def test_a_long_document_equals_its_rolling_window_loss(run, tmp_path):
    root, tok, module, checkpoint = run
    ckpt = checkpoint("long.ckpt", {"window": WINDOW, "packing": "document"})
    ids = ids_of(tok, (root / "long.txt").read_text())
    assert len(ids) > 4 * WINDOW
    keys = {"val_sources": [f"{root}/long.txt", f"{root}/short/0*.txt"]}
    for stride in (WINDOW // 2, 5, WINDOW):
        result = evaluate(ckpt, keys, tmp_path, per_document_path=tmp_path / "d.csv",
                          per_document_stride=stride)  # fmt: skip
        ce = rolling(module, ids, WINDOW, stride)
        assert len(ce) == len(ids) - 1  # every target once
        row = rows_of(result)["long.txt"]
        assert int(row["supervised"]) == len(ce)
        assert float(row["loss"]) == pytest.approx(ce.mean().item(), abs=1e-5, rel=1e-5)
    with pytest.raises(ConfigError, match=r"^per_document_stride=17: must be in 1\.\.16"):
        evaluate(ckpt, keys, tmp_path, per_document_path=tmp_path / "d.csv",
                 per_document_stride=WINDOW + 1)  # fmt: skip


@pytest.mark.parametrize("stride", [1, 3, 8])
def test_rows_score_every_target_once_with_the_context_the_stride_allows(stride):
    rng = np.random.default_rng(stride)
    lengths = rng.integers(1, 60, size=200)
    t = 8
    rows = document_rows(lengths, t, stride, buffer=50)
    row, doc, start, length = rows.pieces
    assert np.bincount(row, weights=length).max() <= t + 1  # a row reads T+1 tokens at most
    seen = [np.zeros(n, int) for n in lengths]  # times each token position is a target
    for r, d, s, n in zip(row, doc, start, length, strict=True):
        targets = np.arange(s + 1, s + n)  # the piece's targets
        if lengths[d] <= t + 1:
            assert (s, n) == (0, lengths[d])  # whole, in one piece
        else:
            assert n == t + 1 and (row == r).sum() == 1  # a window alone in its row
            targets = targets[rows.skip[r] :]
            assert targets[0] - s >= min(t - stride + 1, targets[0])  # its context
        seen[d][targets] += 1
    assert all((s[1:] == 1).all() and s[0] == 0 for s in seen)


def test_evaluate_scores_the_runs_own_validation_split(run, tmp_path):
    root, tok, module, checkpoint = run
    folder = tmp_path / "corpus"
    shutil.copytree(root / "short", folder)
    data = asdict(DataConfig(sources=[f"{folder}/*.txt"], val_fraction=0.3, window=WINDOW))
    ckpt = checkpoint("own.ckpt", data)
    said: list[str] = []
    own = evaluate(ckpt, {}, tmp_path, per_document_path=tmp_path / "own.csv", say=said.append)
    assert said[0] == (
        "scoring the run's validation split as the checkpoint records it: data.val_fraction=0.3"
        f" of data.sources=['{folder}/*.txt'] (by content hash)"
    )
    names = sorted(rows_of(own))
    assert 0 < len(names) < 14  # a split, not all the files
    given = evaluate(ckpt, {"val_sources": [str(folder / n) for n in names]}, tmp_path,
                     per_document_path=tmp_path / "given.csv")  # fmt: skip
    assert own["loss"] == pytest.approx(given["loss"], rel=1e-6)
    assert own["supervised_tokens"] == given["supervised_tokens"]
    windows = evaluate(ckpt, {}, tmp_path, say=said.append)  # without per_document too
    assert windows["documents"] == len(names) and said[2] == said[0]
    assert said[3].startswith("loss: the run's validation windows")
    shutil.rmtree(folder)  # the sources are gone: only now ask for data.val_sources
    with pytest.raises(ConfigError, match=rf"^data\.val_sources: .*{folder}.*data\.val_sources="):
        evaluate(ckpt, {}, tmp_path)
