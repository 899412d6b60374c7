"""Exports: a checkpoint or the token stores, in the files other libraries read.

`python -m packlm.export format=<f> out=<dir> [ckpt_path=<ckpt>] [data/tokenizer overrides]`

1. `checkpoint.py`: the checkpoint's weights, model config, tokenizer and data config.
2. `hf.py` (format=hf): LlamaForCausalLM + tokenizer folder for transformers' Auto classes.
3. `tiktoken_ranks.py` (format=tiktoken): the `.tiktoken` ranks file + pattern and specials.
4. `nanogpt.py` (format=nanogpt): train.bin / val.bin / meta.pkl from the token stores.
5. `megatron.py` (format=megatron): Megatron-LM's .bin/.idx indexed datasets.
6. `output.py`: the output folder, renamed into place only when complete.
7. `__main__.py`: the command (Hydra, conf/export.yaml).
"""

FORMATS = ("hf", "tiktoken", "nanogpt", "megatron")
