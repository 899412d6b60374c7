"""What refusing a damaged checkpoint costs (packlm.checkpoint.verify) against loading it.

    python bench/checkpoint_verify.py                  # GPT-2 small (124M), weights only
    python bench/checkpoint_verify.py --optimizer      # with AdamW's two moments, as last.ckpt

Writes a checkpoint of a 124M-parameter packlm Transformer (12 x 768, vocab 50257, float32:
~500 MB; ~1.5 GB with the optimizer state) once into --dir, then times, median of --repeat,
with the file in the page cache (as right after training or a second load):
- load: what generate/evaluate/export do without the checks: torch.load (mmap) of the
  checkpoint and the Transformer's load_state_dict (which reads every weight);
- load, no mmap: torch.load reading the whole file;
- crc: check_entries (every zip entry's CRC32, threads over the entries);
- finite: check_finite over the state_dict.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import torch

from packlm.checkpoint.verify import check_entries, check_finite
from packlm.config.model import ModelConfig
from packlm.model.transformer import Transformer

GPT2_SMALL = ModelConfig(
    vocab_size=50257, context_length=1024, n_layer=12, n_head=12, n_embd=768, tie_embeddings=True
)


def write_checkpoint(path: Path, optimizer: bool) -> int:
    """A train.py-shaped checkpoint of GPT-2 small; its parameter count."""
    model = Transformer(GPT2_SMALL)
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    ckpt = {"state_dict": state, "global_step": 0, "hyper_parameters": {"model": {}}}
    if optimizer:
        moments = {
            i: {"exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
            for i, p in enumerate(model.parameters())
        }
        ckpt["optimizer_states"] = [{"state": moments, "param_groups": []}]
    torch.save(ckpt, path)
    return sum(p.numel() for p in model.parameters())


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("/tmp/packlm-bench-ckpt"))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--optimizer", action="store_true")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / ("gpt2_small_adamw.ckpt" if args.optimizer else "gpt2_small.ckpt")
    params = write_checkpoint(path, args.optimizer)
    model = Transformer(GPT2_SMALL)

    def load() -> None:
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        weights = {k[6:]: v for k, v in ckpt["state_dict"].items()}
        model.load_state_dict(weights)

    def load_no_mmap() -> None:
        torch.load(path, map_location="cpu", weights_only=True)

    loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    timed(load, 1)  # the page cache
    results = {
        "load (mmap + load_state_dict)": timed(load, args.repeat),
        "load, no mmap": timed(load_no_mmap, args.repeat),
        "crc (check_entries)": timed(lambda: check_entries(path), args.repeat),
        "finite (check_finite)": timed(lambda: check_finite(loaded, path), args.repeat),
    }
    size = os.path.getsize(path) / 1e6
    print(f"{params / 1e6:.1f}M parameters, {size:,.0f} MB, {os.cpu_count()} CPUs, "
          f"median of {args.repeat}")  # fmt: skip
    for name, seconds in results.items():
        print(f"  {name:32s} {seconds:7.3f} s")
    checks = results["crc (check_entries)"] + results["finite (check_finite)"]
    base = results["load (mmap + load_state_dict)"]
    print(
        f"  checks / load: {checks / base:.2f}x   (crc {size / 1e3 / results['crc (check_entries)']:.2f} GB/s)"
    )


if __name__ == "__main__":
    main()
