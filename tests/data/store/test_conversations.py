"""Conversation sources: four record forms -> one list of turns; bad records counted and named."""

from __future__ import annotations

import json

import pytest

from packlm.config.data import DataConfig
from packlm.data.store.corpus import Corpus
from packlm.data.store.sources import ReadCounts, SourceError, iter_documents
from packlm.data.store.sources.conversations import BadRecord, record_turns
from packlm.errors import ConfigError
from packlm.tokenizer.chat import render_text

SYSTEM, USER, ANSWER = "Be brief.", "What is 2+2?\nAnd 3+3?", "4 and 6."
FOUR_FORMS = {
    "messages": {"messages": [{"role": "system", "content": SYSTEM},
                              {"role": "user", "content": USER},
                              {"role": "assistant", "content": ANSWER}]},
    "sharegpt": {"conversations": [{"from": "system", "value": SYSTEM},
                                   {"from": "human", "value": USER},
                                   {"from": "gpt", "value": ANSWER}]},
    "alpaca": {"system": SYSTEM, "instruction": "What is 2+2?", "input": "And 3+3?",
               "output": ANSWER},
    "prompt_completion": {"prompt": [{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": USER}],
                          "completion": ANSWER},
}  # fmt: skip


def test_the_four_forms_of_one_conversation_give_identical_turns():
    expected = [("system", SYSTEM), ("user", "What is 2+2?\n\nAnd 3+3?"), ("assistant", ANSWER)]
    for form, record in FOUR_FORMS.items():
        want = expected if form == "alpaca" else [*expected[:1], ("user", USER), expected[2]]
        assert record_turns(record) == want, form
        assert record_turns(record, form) == want, form
    # alpaca joins instruction and input with a blank line: written so, all four agree
    same = {**FOUR_FORMS["alpaca"], "instruction": USER, "input": ""}
    assert record_turns(same) == record_turns(FOUR_FORMS["messages"])


def test_plain_prompt_completion_and_alpaca_without_input():
    assert record_turns({"prompt": "p", "completion": "c"}) == [("user", "p"), ("assistant", "c")]
    assert record_turns({"instruction": "i", "output": "o", "input": None}) == [
        ("user", "i"), ("assistant", "o")]  # fmt: skip


@pytest.mark.parametrize(
    "record, reason",
    [
        ({"messages": [{"role": "wizard", "content": "x"}]}, "unknown_role"),
        ({"conversations": [{"from": "alien", "value": "x"}]}, "unknown_role"),
        ({"messages": []}, "empty"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "no_assistant"),
        ({"messages": "hello"}, "wrong_type"),
        ({"messages": [["user", "hi"]]}, "wrong_type"),
        ({"messages": [{"role": "assistant", "content": None}]}, "wrong_type"),
        ({"messages": [{"role": 3, "content": "x"}]}, "wrong_type"),
        ({"instruction": 5, "output": "o"}, "wrong_type"),
        ({"prompt": "p", "completion": ["not", "messages"]}, "wrong_type"),
        ({"text": "plain"}, "not_a_conversation"),
        ([1, 2], "not_a_conversation"),
        ({"messages": [{"role": "assistant", "content": "a"}], "prompt": "p",
          "completion": "c"}, "ambiguous"),
    ],
)  # fmt: skip
def test_bad_records_have_a_reason(record, reason):
    with pytest.raises(BadRecord) as e:
        record_turns(record)
    assert e.value.reason == reason


def test_a_forced_form_settles_an_ambiguous_record():
    record = {"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}],
              "prompt": "p", "completion": "c"}  # fmt: skip
    assert record_turns(record, "messages") == [("user", "u"), ("assistant", "a")]
    assert record_turns(record, "prompt_completion") == [("user", "p"), ("assistant", "c")]


def read(tmp_path, entries, val=None):
    data = DataConfig(sources=entries, val_sources=val)
    corpus = Corpus.from_config(data.validate())
    counts = ReadCounts()
    return list(iter_documents(corpus.sources, corpus.options, counts)), counts


def test_jsonl_source_counts_and_names_every_bad_record(tmp_path, caplog):
    path = tmp_path / "chat.jsonl"
    lines = [json.dumps(r) for r in FOUR_FORMS.values()]
    lines += [json.dumps({"messages": [{"role": "user", "content": "no answer"}]}),
              "{not json",
              "",
              json.dumps({"text": "plain"}),
              json.dumps({"messages": [{"role": "pirate", "content": "arr"},
                                       {"role": "assistant", "content": "a"}]})]  # fmt: skip
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    docs, counts = read(tmp_path, [{"path": str(path), "chat": "auto"}])
    assert [d.doc_id.rsplit(":", 1)[1] for d in docs] == ["1", "2", "3", "4"]
    assert len({d.text for d in docs}) == 2  # alpaca joins its input with a blank line
    assert docs[0].turns == tuple(record_turns(FOUR_FORMS["messages"]))
    assert docs[0].text == render_text(docs[0].turns)
    assert counts.bad_records == {"no_assistant": 1, "invalid_json": 1,
                                  "not_a_conversation": 1, "unknown_role": 1}  # fmt: skip
    named = [e.split(": ")[0] for e in counts.bad_record_examples]
    assert named == [f"{path}:5", f"{path}:6", f"{path}:8", f"{path}:9"]
    assert counts.dropped()["bad_conversations"] == 4
    assert f"{path}:9: unknown_role" in caplog.text


def test_text_sources_report_no_conversation_counts(tmp_path):
    (tmp_path / "a.txt").write_text("hello", encoding="utf-8")
    _, counts = read(tmp_path, [str(tmp_path / "a.txt")])
    assert "bad_conversations" not in counts.dropped()


def test_chat_source_of_a_text_file_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(SourceError, match="a chat source .* reads conversations from JSON lines"):
        read(tmp_path, [{"path": str(tmp_path / "a.txt"), "chat": "auto"}])


def test_unknown_chat_form_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"data.sources\[0\].chat='openai'"):
        DataConfig(sources=[{"path": "x.jsonl", "chat": "openai"}]).validate()


def test_chat_form_is_in_the_fingerprint(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(FOUR_FORMS["messages"]) + "\n", encoding="utf-8")
    text = Corpus.from_config(DataConfig(sources=[str(path)])).fingerprint()
    chat = Corpus.from_config(DataConfig(sources=[{"path": str(path), "chat": "auto"}]))
    assert "chat" not in text["data.sources"][0]
    assert chat.fingerprint()["data.sources"][0]["chat"]["form"] == "auto"


def test_parquet_rows_are_conversations(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [FOUR_FORMS["messages"], {"messages": [{"role": "user", "content": "only"}]}]
    path = tmp_path / "chat.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    docs, counts = read(tmp_path, [{"path": str(path), "chat": "messages"}])
    assert [d.turns for d in docs] == [tuple(record_turns(FOUR_FORMS["messages"]))]
    assert counts.bad_records == {"no_assistant": 1}
    assert counts.bad_record_examples[0].startswith(f"{path}:row 2: no_assistant")
