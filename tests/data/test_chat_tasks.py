"""The conversation set `experiment=chat` trains on: shipped, small, made by its generator."""

from __future__ import annotations

import json

from packlm.data import chat_tasks
from packlm.data.store.sources.conversations import record_turns


def test_the_shipped_file_is_the_generators_output_and_small(tmp_path):
    shipped = chat_tasks.SHIPPED.read_text(encoding="utf-8")
    assert shipped == chat_tasks.render()
    assert len(shipped.encode("utf-8")) < 400_000
    assert chat_tasks.write(tmp_path / "again.jsonl").read_text(encoding="utf-8") == shipped
    assert chat_tasks.render(50, seed=1) != chat_tasks.render(50, seed=2)


def test_every_answer_is_right():
    for messages in chat_tasks.conversations():
        turns = [m for m in messages if m["role"] != "system"]
        for question, answer in zip(turns[0::2], turns[1::2], strict=True):
            assert (question["role"], answer["role"]) == ("user", "assistant")
            q, a = question["content"], answer["content"]
            if q.startswith("What is "):
                x, y = q[len("What is ") : -1].split(" + ")
                assert int(a) == int(x) + int(y)
            elif q.startswith("Reverse the words: "):
                assert a.split() == q[len("Reverse the words: ") :].split()[::-1]
            elif q.startswith("Say exactly: "):
                assert a == q[len("Say exactly: ") :]
            else:
                assert int(a) == len(q[len("How many words: ") : -1].split())


def test_each_line_is_a_conversation_of_the_messages_form():
    lines = chat_tasks.SHIPPED.read_text(encoding="utf-8").splitlines()
    assert len(lines) == chat_tasks.N
    for line in lines[:200]:
        turns = record_turns(json.loads(line))
        assert any(role == "assistant" for role, _ in turns)
