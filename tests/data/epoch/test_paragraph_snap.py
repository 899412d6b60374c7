"""Paragraph starts of a store (against a brute-force decode) and windows snapped to them
(data.snap=paragraph): the next boundary within the tolerance, pure, loader invariants."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.packing_checks import check_exact_resume, check_ranks_and_workers_exactly_once
from helpers.plans import config, plan_of, write_position_store
from helpers.stores import prepare, write_corpus
from packlm.data.store import paragraphs
from packlm.data.store.paragraphs import paragraph_starts, token_table
from packlm.data.store.token_store import write_store
from packlm.errors import ConfigError

TABLE = [b"", b"\n", b"\n\n", b" ", b"a", b"b.", b" c", b"\n\n  ", b"\nx", b"y\n", b"z\n\n",
         b"\t", b" \n", b"q\n\nr", b"\n \n", b"\n\n\n"]  # fmt: skip
"""Token bytes of a synthetic vocabulary; id 0 is the EOS (a special token: no bytes)."""


def brute_force(documents, table) -> list[int]:
    """Store positions of the paragraph starts, straight from the definition, per token."""
    out, pos = [], 0
    for ids in documents:
        before = b""
        for i, t in enumerate(ids):
            b = table[t]
            if i > 0 and b.strip():
                run = before[len(before.rstrip()) :] + b[: len(b) - len(b.lstrip())]
                if run.count(b"\n") >= 2:
                    out.append(pos + i)
            before += b
        pos += len(ids)
    return out


def random_documents(seed, n=60):
    rng = np.random.default_rng(seed)
    return [np.r_[rng.integers(1, len(TABLE), size=rng.integers(0, 30)), 0] for _ in range(n)]


@pytest.mark.parametrize("chunk", [3, 64, 1 << 20])
def test_paragraph_starts_equal_a_brute_force_decode(monkeypatch, chunk):
    monkeypatch.setattr(paragraphs, "CHUNK", chunk)  # carries across chunk edges
    docs = random_documents(chunk)
    tokens = np.concatenate(docs).astype(np.uint16)
    offsets = np.cumsum([0] + [len(d) for d in docs])
    got = paragraph_starts(tokens, offsets, TABLE)
    assert got.dtype == np.uint32 and got.tolist() == brute_force(docs, TABLE)
    assert len(got) > 10  # the corpus has paragraphs to find


def test_a_real_store_records_its_paragraph_starts_once(tmp_path):
    write_corpus(tmp_path / "corpus")
    prepared = prepare(tmp_path / "corpus", tmp_path / "cache", separator=None)
    store, tok = prepared.open("train"), prepared.tokenizer
    table = token_table(tok)
    docs = [store.document(d) for d in range(store.n_docs)]
    got = store.paragraph_starts(tok)
    assert got.tolist() == brute_force(docs, table) and len(got) > 20
    for p in got[:20].tolist():  # the text before each start ends with a blank line
        d = int(np.searchsorted(store.doc_offsets, p, side="right")) - 1
        text = tok.decode(store.tokens[store.doc_offsets[d] : p])
        assert "\n\n" in text[len(text.rstrip()) :]
    cached = list(store.path.glob("paragraphs-*.npy"))
    assert len(cached) == 1 and not list(store.path.glob(".paragraphs-*"))
    again = store.paragraph_starts(tok)
    assert isinstance(again, np.memmap) and np.array_equal(again, got)
    other = store.paragraph_starts([b"x"] * tok.vocab_size)  # other token bytes, other key
    assert len(other) == 0 and len(list(store.path.glob("paragraphs-*.npy"))) == 2


def stream_boundaries(plan, lengths, starts, bos):
    """Stream positions of every document start and paragraph start of the epoch."""
    offsets = np.cumsum(np.r_[0, lengths - bos])
    out = set()
    for j, d in enumerate(plan.order.tolist()):
        base = int(plan.doc_start(np.array([j]))[0])
        out.add(base)
        inside = starts[(starts >= offsets[d]) & (starts < offsets[d + 1])]
        out.update((base + inside - offsets[d] + bos).tolist())
    return np.array(sorted(out))


@pytest.mark.parametrize(("tail", "bos"), [("pad", 0), ("cover", 1), ("drop", 0)])
def test_snapped_starts_move_to_the_next_boundary_within_the_tolerance(tail, bos):
    rng = np.random.default_rng(7)
    store_lengths = rng.integers(1, 40, size=200)
    lengths = store_lengths + bos  # the plan's documents carry the BOS
    n = int(store_lengths.sum())
    firsts = np.cumsum(np.r_[0, store_lengths])[:-1]
    starts = np.setdiff1d(rng.choice(n, size=n // 9, replace=False), firsts).astype(np.uint32)
    base = dict(window=16, stride=12, tail=tail, random_offset=True, seed=4, bos=bool(bos),
                shuffle_documents=True)  # fmt: skip
    plain = plan_of(lengths, config(**base))
    cfg = config(**base, snap="paragraph", snap_tolerance=5)
    snapped = plan_of(lengths, cfg, paragraph_starts=starts)
    ids = np.arange(plain.n_samples)
    assert snapped.n_samples == plain.n_samples
    _, g0, _ = plain.windows(ids)
    s, g1, r1 = snapped.windows(ids)
    bounds = stream_boundaries(snapped, store_lengths + bos, starts, bos)
    seq_start, seq_len, _, full = snapped.layout(s)
    k = ids - snapped.window_cum[s]
    movable = (k > 0) & ((k < full) if tail == "cover" else True)
    nxt = bounds[np.minimum(np.searchsorted(bounds, g0), len(bounds) - 1)]
    ok = movable & (nxt >= g0) & (nxt - g0 <= 5) & (nxt + 2 <= seq_start + seq_len)
    assert np.array_equal(g1, np.where(ok, nxt, g0))  # the next boundary, or stay
    assert (g1 != g0).sum() > 20
    assert np.isin(g1, bounds).mean() > np.isin(g0, bounds).mean()
    assert ((g1 + r1 <= seq_start + seq_len) & (r1 >= 2)).all()
    again = plan_of(lengths, cfg, paragraph_starts=starts)
    assert np.array_equal(again.windows(ids)[1], g1)  # still a pure function of (seed, epoch)


def test_paragraph_snap_without_the_stores_starts_names_the_key():
    with pytest.raises(ConfigError, match=r"^data\.snap=paragraph: the plan needs"):
        plan_of([5, 6], config(window=4, stride=4, snap="paragraph", snap_tolerance=2))
    with pytest.raises(ConfigError, match=r"^data\.snap='sentence'"):
        config(snap="sentence")


@pytest.fixture(scope="module")
def store_and_starts(tmp_path_factory):
    rng = np.random.default_rng(8)
    lengths = rng.integers(1, 40, size=150)
    store = write_position_store(tmp_path_factory.mktemp("ps") / "store", lengths)
    starts = np.setdiff1d(rng.choice(int(lengths.sum()), 400, replace=False), store.doc_offsets)
    return store, starts.astype(np.uint32)


def snap_config():
    return config(window=16, stride=8, snap="paragraph", snap_tolerance=6, random_offset=True,
                  shuffle=True, shuffle_documents=True, batch_size=5, pack_size=50)  # fmt: skip


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_ranks_and_workers_yield_each_snapped_sample_exactly_once(store_and_starts):
    store, starts = store_and_starts
    cfg, lengths = snap_config(), np.diff(store.doc_offsets)
    build = lambda e: plan_of(lengths, cfg, e, paragraph_starts=starts)  # noqa: E731
    check_ranks_and_workers_exactly_once(store, cfg, build)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_a_resumed_snapped_loader_continues_exactly(store_and_starts):
    store, starts = store_and_starts
    cfg, lengths = snap_config(), np.diff(store.doc_offsets)
    check_exact_resume(store, cfg, lambda e: plan_of(lengths, cfg, e, paragraph_starts=starts))


def test_an_empty_store_has_no_paragraphs(tmp_path):
    store = write_store(tmp_path / "s", [], vocab_size=4, eos_id=0, pad_id=1)
    assert store.paragraph_starts([b""] * 4).tolist() == []
