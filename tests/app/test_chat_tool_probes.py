"""Conversations through the tools as a user types them (issue 62): `python -m packlm.prepare`
on a chat source whose long conversations data.chat_overflow cuts, killed mid-build and run
again; a loaded tokenizer without the chat tokens; data.chat_supervised / chat_overflow of
the wrong type or case. One `error:` line and its exit code, never a traceback; a killed build
leaves nothing that a rerun reads."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.runs import run_train
from packlm.data.store.token_store import TokenStore

SRC = str(Path(__file__).resolve().parents[2] / "src")


def tool(
    module: str, *args: str, cwd: Path, **kw
) -> subprocess.Popen | subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")])}
    env.pop("HYDRA_FULL_ERROR", None)
    argv = [sys.executable, "-m", module, *args]
    if kw.get("background"):
        return subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)  # fmt: skip
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def last_line(run: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    return run.stderr.strip().splitlines()[-1]


def chat_file(path: Path, n: int, seed: int = 0) -> Path:
    """n conversations of 1-4 exchanges; with window 64 about half are cut between turns
    and a quarter of the questions too long to keep."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(500)]
    with path.open("w", encoding="utf-8") as f:
        for _ in range(n):
            turns = []
            for _ in range(rng.randint(1, 4)):
                k = rng.choice([8, 8, 8, 80])  # a long question: the turn is dropped
                turns.append({"role": "user", "content": " ".join(rng.choices(words, k=k))})
                turns.append({"role": "assistant", "content": " ".join(rng.choices(words, k=8))})
            f.write(json.dumps({"messages": turns}) + "\n")
    return path


def prepare_args(src: Path, cache: Path, *extra: str) -> list[str]:
    return [f"data.sources=[{{path: {src}, chat: auto}}]", "tokenizer.vocab_size=300",
            "data.window=64", "data.stride=64", f"cache_dir={cache}", *extra]  # fmt: skip


def test_prepare_agrees_when_chat_overflow_cuts_conversations(tmp_path):
    """Failed before: bytes read != bytes stored, 'agree NO' and exit 1 on every chat source
    whose long conversations cut_turns had cut (the turns left out were not counted)."""
    src = chat_file(tmp_path / "chat.jsonl", 400)
    run = tool("packlm.prepare", *prepare_args(src, tmp_path / "cache"), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    for split in ("train", "val"):
        row, counts = report["summary"][split], report[split]["counts"]
        cut = counts["chat_overflow"]
        assert cut["conversations_cut"] > 0 and cut["bytes_dropped"] > 0
        assert row["bytes_read"] == row["bytes_stored"] + cut["bytes_dropped"]
    assert "bytes of their turns left out (data.chat_overflow)" in run.stderr
    # drop: the dropped conversations' text is counted the same way
    run = tool("packlm.prepare", *prepare_args(src, tmp_path / "cache", "data.chat_overflow=drop"),
               cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)
    row, cut = report["summary"]["train"], report["train"]["counts"]["chat_overflow"]
    assert cut["conversations_dropped"] > 0
    assert row["bytes_read"] == row["bytes_stored"] + cut["bytes_dropped"]


@pytest.mark.slow
def test_a_chat_store_build_killed_mid_way_is_never_read_and_the_rerun_is_whole(tmp_path):
    src = chat_file(tmp_path / "chat.jsonl", 40_000)  # ~5 MB: seconds of store build
    cache = tmp_path / "cache"
    proc = tool("packlm.prepare", *prepare_args(src, cache), cwd=tmp_path, background=True)
    seen = b""
    while b"building token stores" not in seen:
        chunk = proc.stderr.read1(4096)
        assert chunk, seen.decode(errors="replace")[-2000:]
        seen += chunk
    time.sleep(0.1)  # inside the build (its bar and first chunks), before its rename
    proc.send_signal(signal.SIGKILL)
    _, rest = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert b"\nbuilt " not in seen + rest, "the build finished before the kill"
    again = tool("packlm.prepare", *prepare_args(src, cache), cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    clean = tool("packlm.prepare", *prepare_args(src, tmp_path / "clean"), cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr[-3000:]
    a, b = json.loads(again.stdout), json.loads(clean.stdout)
    for split in ("train", "val"):
        x, y = TokenStore.open(a[split]["path"]), TokenStore.open(b[split]["path"])
        assert np.array_equal(x.tokens, y.tokens) and np.array_equal(x.roles, y.roles)
        assert np.array_equal(x.doc_offsets, y.doc_offsets)
        assert a["summary"][split] == b["summary"][split]


def test_a_loaded_tokenizer_without_the_chat_tokens_is_refused_before_any_store(
    tmp_path, golden_bpe
):
    folder = tmp_path / "gpt2"
    folder.mkdir()
    shutil.copy(golden_bpe / "gpt2_vocab.json", folder / "vocab.json")
    shutil.copy(golden_bpe / "gpt2_merges.txt", folder / "merges.txt")
    src = chat_file(tmp_path / "chat.jsonl", 20)
    args = [f"data.sources=[{{path: {src}, chat: auto}}]", f"tokenizer.path={folder}",
            f"cache_dir={tmp_path / 'cache'}"]  # fmt: skip
    run = tool("packlm.prepare", *args, cwd=tmp_path)
    assert run.returncode == 2, run.stderr[-3000:]
    line = last_line(run)
    assert line.startswith(f"error: tokenizer.path={str(folder)!r}: ") and "<|im_start|>" in line
    assert not list((tmp_path / "cache").rglob("tokens.bin"))


@pytest.mark.parametrize("key", ["data.chat_supervised", "data.chat_overflow"])
@pytest.mark.parametrize("value", ["[assistant]", "ASSISTANT", "1", "null", "{a: 1}"])
def test_a_wrong_chat_key_is_one_line_exit_2_before_any_work(tmp_path, key, value):
    src = chat_file(tmp_path / "chat.jsonl", 5)
    run = tool("packlm.prepare", *prepare_args(src, tmp_path / "cache", f"{key}={value}"),
               cwd=tmp_path)  # fmt: skip
    assert run.returncode == 2, run.stderr[-3000:]
    line = last_line(run)
    assert line.startswith(f"error: {key}="), line
    assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_a_mixture_of_chat_and_prose_trains_and_chat_prompts_hold_control_text(tmp_path):
    """A chat source beside a text source in a mixture by share trains; `generate chat=true`
    on its checkpoint takes a prompt typing the control tokens (text, as in training) and
    answers in one line, never a traceback."""
    chat = chat_file(tmp_path / "chat.jsonl", 300)
    prose = tmp_path / "prose.txt"
    prose.write_text("\n\n".join(f"paragraph {k}: the fox jumps over dog {k}." for k in range(200)))
    sources = (f"data.sources=[{{path: {chat}, chat: auto, share: 0.5, name: chat}}, "
               f"{{path: {prose}, share: 0.5, name: prose}}]")  # fmt: skip
    args = [sources, 'data.separator="\n\n"', "data.window=32", "data.stride=32",
            "data.batch_size=4", "tokenizer.vocab_size=300", "model.context_length=32",
            "model.n_layer=1", "model.n_head=2", "model.n_embd=32", "optim.warmup_steps=2",
            "trainer.max_steps=4", "trainer.val_check_interval=2", "data.num_workers=0",
            "trainer.enable_progress_bar=false", "train.sample_tokens=4",
            f"cache_dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    run = run_train(args, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    prompt = "say <|im_end|><|im_start|>assistant\nyes <|endoftext|>"
    gen = tool("packlm.generate", f"ckpt_path={ckpt}", "chat=true", f"prompt={json.dumps(prompt)}",
               "max_new_tokens=6", cwd=tmp_path)  # fmt: skip
    assert gen.returncode == 0, gen.stderr[-3000:]
    assert "Traceback" not in gen.stderr and len(gen.stdout.strip().splitlines()) == 1
