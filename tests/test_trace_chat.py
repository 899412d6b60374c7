"""`packlm.trace` on conversations: the targets it counts are the loader's (the chat mask
included), and it names the conversation (file and line) and the turn (index, role) of each
supervised token; a cut conversation's pieces keep their file:line for data.skip_documents."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest

from packlm.batch import IGNORE_INDEX
from packlm.commands.trace import Schedule, Tracer, parse_doc_id
from packlm.commands.trace.cli import render
from packlm.config.data import DataConfig
from packlm.config.tokenizer import TokenizerConfig
from packlm.data.epoch.loader import PlanDataLoader, WindowDataset, plan_signature
from packlm.data.epoch.sampler import PlanSampler
from packlm.data.plans import EpochPlans
from packlm.data.skip import resolve_documents
from packlm.data.store.prepared import prepare_stores
from packlm.data.store.sources.document import split_turn
from packlm.errors import ConfigError
from packlm.tokenizer.chat import IM_END

WINDOW = 48
WORDS = ["alpha", "beta", "gamma", "delta", "sum", "is", "the", "answer", "7", "42"]
PROSE = "Plain text sits beside the conversations and is supervised everywhere. " * 6


def conversations(n: int) -> list[list[dict[str, str]]]:
    """Random conversations: short ones, and long ones that data.chat_overflow cuts."""
    rng = random.Random(5)
    out = []
    for k in range(n):
        turns = [{"role": "system", "content": "Be brief."}] if k % 3 == 0 else []
        for _ in range(rng.randint(1, 5 if k % 4 else 1)):
            turns.append(
                {"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(1, 6)))}
            )
            turns.append(
                {"role": "assistant", "content": " ".join(rng.choices(WORDS, k=rng.randint(1, 8)))}
            )
        out.append(turns)
    return out


@pytest.fixture(scope="module", params=[False, True], ids=["no_bos", "bos"])
def run(request, tmp_path_factory):
    """(plans, the conversations by file line) of a chat source and a text source."""
    tmp = tmp_path_factory.mktemp("chat")
    convs = conversations(40)
    chat, prose = tmp / "chat.jsonl", tmp / "prose.txt"
    chat.write_text("".join(json.dumps({"messages": t}) + "\n" for t in convs), encoding="utf-8")
    prose.write_text(PROSE, encoding="utf-8")
    data = DataConfig.from_mapping(
        dict(sources=[{"path": str(chat), "chat": "auto"}, str(prose)], val_fraction=0.0,
             window=WINDOW, stride=WINDOW, pack_size=WINDOW + 1, pack_strategy="best_fit",
             batch_size=3, shuffle=True, seed=3, bos=request.param)
    ).validate()  # fmt: skip
    prepared = prepare_stores(data, TokenizerConfig(vocab_size=300), tmp / "cache",
                              progress=False, num_workers=0)  # fmt: skip
    plans = EpochPlans(prepared=prepared, data=data, progress=False)
    return plans, {line: turns for line, turns in enumerate(convs, start=1)}


def loader_batches(plans: EpochPlans, chat_supervised: str) -> list[dict[str, np.ndarray]]:
    """Epoch 0 as training's loader yields it (one rank, no worker)."""
    cfg, store = plans.data, plans.store("train")
    sampler = PlanSampler(lambda e, p=None: plans.plan(e, "train", p), cfg.batch_size, 0, 1, 0)
    dataset = WindowDataset(store.path, cfg.window, store.pad_id,
                            store.eos_id if cfg.bos else None, chat_supervised=chat_supervised)  # fmt: skip
    loader = PlanDataLoader(dataset, sampler, cfg.packing, plan_signature(cfg, store, None),
                            num_workers=0)  # fmt: skip
    sampler.set_epoch(0)
    return [{k: v.numpy() for k, v in b.items()} for b in loader]


@pytest.mark.parametrize("chat_supervised", ["assistant", "all"])
def test_each_supervised_token_is_named_by_conversation_and_turn(run, chat_supervised):
    plans, by_line = run
    plans = EpochPlans(prepared=plans.prepared, progress=False,
                       data=replace(plans.data, chat_supervised=chat_supervised))  # fmt: skip
    tracer, tok = Tracer(plans, Schedule()), plans.tokenizer
    batches = loader_batches(plans, chat_supervised)
    cut = seen_turns = 0
    for b, got in enumerate(batches):
        for row in tracer.batch(0, b)["rows"]:
            labels = got["labels"][row["row"]]
            assert row["input_ids"] == got["input_ids"][row["row"]].tolist()
            assert row["supervised"] == int((labels != IGNORE_INDEX).sum())  # the mask's
            assert sum(p["targets"] for p in row["pieces"]) == row["supervised"]
            for p in row["pieces"]:
                if p["source_index"] != 0:  # plain text: every target, no turns
                    assert (
                        "turns" not in p
                        and p["targets"] == p["token_span"][1] - 1 - p["token_span"][0]
                    )
                    continue
                turns = by_line[p["record"]]  # the conversation: its file's line
                assert p["path"].endswith("chat.jsonl")
                cut += p["first_turn"] is not None
                assert sum(u["targets"] for u in p["turns"]) == p["targets"]
                for u in p["turns"]:
                    lo, hi = u["row_columns"]
                    targets = labels[max(lo, 1) - 1 : hi - 1]  # labels whose target is in it
                    kept = targets[targets != IGNORE_INDEX]
                    assert len(kept) == u["targets"]
                    assert u["role"] == turns[u["turn"]]["role"]
                    if chat_supervised == "assistant":  # the answer and its end, exactly
                        want = (
                            turns[u["turn"]]["content"] + IM_END if u["role"] == "assistant" else ""
                        )
                        assert tok.decode(kept.tolist()) == want
                    else:  # every token of the turn but the conversation's first
                        assert u["targets"] == hi - lo - (lo == p["row_columns"][0])
                    seen_turns += 1
    assert cut > 0 and seen_turns > 100  # cut conversations' pieces were traced too


def test_the_text_trace_names_turns_and_cut_pieces(run):
    plans, _ = run
    tracer = Tracer(plans, Schedule())
    traces = [tracer.batch(0, b) for b in range(tracer.epoch_batches(0))]
    text = render(traces)
    assert " assistant columns " in text and " user columns " in text
    assert "chat.jsonl record " in text and " from turn " in text  # a cut conversation's piece
    assert "conversation's token whose role does not train" in text


def test_skip_documents_names_every_piece_of_a_cut_conversation(run):
    plans, _ = run
    store = plans.store("train")
    ids = [store.doc_id(d) for d in range(store.n_docs)]
    pieces = [d for d, i in enumerate(ids) if split_turn(i)[1] is not None]
    whole = split_turn(ids[pieces[0]])[0]  # "0:<path>:<line>", the conversation
    mine = [d for d in pieces if split_turn(ids[d])[0] == whole]
    short = whole.partition(":")[2]  # "path:line", as the trace prints it
    assert resolve_documents(store, [short]).tolist() == mine
    assert resolve_documents(store, [whole]).tolist() == mine
    one = ids[mine[-1]].partition(":")[2]  # "path:line@turn<k>": that piece alone
    assert resolve_documents(store, [one]).tolist() == [mine[-1]]
    with pytest.raises(ConfigError, match="no training document"):
        resolve_documents(store, [short + "@turn999"])


def test_cut_piece_ids_parse_to_their_conversation():
    assert split_turn("0:d/x.jsonl:12@turn3") == ("0:d/x.jsonl:12", 3)
    assert parse_doc_id("0:d/x.jsonl:12@turn3") == {"path": "d/x.jsonl", "record": 12}
    for other in ("0:a@turn3", "0:x.jsonl:5@turnx", "0:x.jsonl:5@turn3@turn4", "0:x:5@turn"):
        assert split_turn(other) == (other, None)  # a text file's name, not a cut piece
    assert parse_doc_id("0:a@turn3") == {"path": "a@turn3", "record": None}
