"""Runs train.py (argv: phase, marker file, overrides) with a hook that marks the moment of
the chosen phase: it writes the marker file, then pauses 1.5 s inside the phase so the
signal of test_fault_injection.py lands there."""

import os
import signal
import sys
import time

signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
phase, marker = sys.argv[1], sys.argv[2]
sys.argv = ["train.py", *sys.argv[3:]]


def mark():
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    time.sleep(1.5)


if phase == "pre-tokenizing":
    from packlm.tokenizer.training import counting

    real_batches = counting._batches

    def batches(*args):
        for i, b in enumerate(real_batches(*args)):
            if i == 3:  # the workers are running (they start after the first two)
                mark()
            yield b

    counting._batches = batches
elif phase == "merging":
    from packlm.tokenizer.training import bpe

    real_engine = bpe._merge_engine

    def engine(name):
        learn = real_engine(name)

        def marked(*a, **k):
            mark()
            return learn(*a, **k)

        return marked

    bpe._merge_engine = engine
elif phase == "store encoding":
    from packlm.data.store.encode import OrderedEncoder

    real_submit = OrderedEncoder.submit
    calls = []

    def submit(self, texts, tag):
        calls.append(1)
        if len(calls) == 3:
            mark()
        return real_submit(self, texts, tag)

    OrderedEncoder.submit = submit
elif phase == "training":
    from packlm.callbacks import checkpointing

    real_end = checkpointing.LastCheckpoint.on_train_batch_end

    def on_end(self, trainer, *a):
        if trainer.global_step == 3:
            mark()
        return real_end(self, trainer, *a)

    checkpointing.LastCheckpoint.on_train_batch_end = on_end
elif phase == "checkpoint write":  # inside the third checkpoint's torch.save
    from packlm.callbacks import checkpointing

    state = {"saves": 0, "writes": 0}
    real_save = checkpointing.AtomicCheckpointIO.save_checkpoint
    real_write = checkpointing._RecordingWriter.write

    def save(self, *a, **k):
        state["saves"], state["writes"] = state["saves"] + 1, 0
        return real_save(self, *a, **k)

    def write(self, data):
        state["writes"] += 1
        if state["saves"] == 3 and state["writes"] == 2:
            mark()
        return real_write(self, data)

    checkpointing.AtomicCheckpointIO.save_checkpoint = save
    checkpointing._RecordingWriter.write = write

from packlm.train import main  # noqa: E402 (after the hooks are in place)

main()
