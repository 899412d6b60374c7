"""A small conversation set made here, no download: `python train.py experiment=chat`'s data.

Four tasks a small model learns in a minute on a CPU, each answer short and exact, so a run
shows whether the model learned to answer and then stop at `<|im_end|>`:

    add       "What is 23 + 58?"                     -> "81"
    reverse   "Reverse the words: red fox runs"      -> "runs fox red"
    echo      "Say exactly: blue moon"               -> "blue moon"
    count     "How many words: a b c d?"             -> "4"

Some conversations hold a system turn and some two exchanges. The set is a pure function of
(n, seed); the file shipped beside this module (`chat_tasks.jsonl`, the `messages` form, one
conversation a line) is `write(SHIPPED)`, and a test checks it still is:

    python -m packlm.data.chat_tasks            # rewrite the shipped file
    python -m packlm.data.chat_tasks out.jsonl 20000 7   # another size or seed
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SHIPPED = Path(__file__).with_name("chat_tasks.jsonl")
N, SEED = 2000, 0
WORDS = ("red", "fox", "blue", "moon", "cat", "dog", "sun", "tree", "river", "stone",
         "bird", "rain", "star", "leaf", "wind", "fish", "gold", "snow", "road", "song")  # fmt: skip
SYSTEM = "You answer with the result only."


def exchange(rng: random.Random) -> tuple[str, str]:
    """One (question, answer) of a random task."""
    task = rng.choice(("add", "reverse", "echo", "count"))
    words = rng.choices(WORDS, k=rng.randint(1, 4))
    if task == "add":
        a, b = rng.randint(0, 99), rng.randint(0, 99)
        return f"What is {a} + {b}?", str(a + b)
    if task == "reverse":
        return f"Reverse the words: {' '.join(words)}", " ".join(reversed(words))
    if task == "echo":
        return f"Say exactly: {' '.join(words)}", " ".join(words)
    return f"How many words: {' '.join(words)}?", str(len(words))


def conversations(n: int = N, seed: int = SEED) -> list[list[dict[str, str]]]:
    """n conversations in the `messages` form."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        messages = [{"role": "system", "content": SYSTEM}] if rng.random() < 0.25 else []
        for _ in range(1 if rng.random() < 0.8 else 2):
            question, answer = exchange(rng)
            messages += [{"role": "user", "content": question},
                         {"role": "assistant", "content": answer}]  # fmt: skip
        out.append(messages)
    return out


def render(n: int = N, seed: int = SEED) -> str:
    """The JSONL text of the set."""
    return "".join(json.dumps({"messages": m}) + "\n" for m in conversations(n, seed))


def write(path: str | Path = SHIPPED, n: int = N, seed: int = SEED) -> Path:
    """Write the set to `path` (through a temporary name: a reader never sees half a file)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render(n, seed), encoding="utf-8")
    tmp.replace(path)
    return path


if __name__ == "__main__":
    args = sys.argv[1:]
    print(write(args[0] if args else SHIPPED, *(int(a) for a in args[1:3])))
