"""The checkpoint: one home for its format (imported by module, no re-exports, so reading a
checkpoint never imports Lightning).

1. `contents.py`: what packlm adds under `KEY` (the tokenizer's state, the data config, the
   run settings a resume compares), read back with plain `torch.load(weights_only=True)`;
   the run folder a checkpoint belongs to.
2. `extras.py`: `CheckpointExtras`, the Lightning callback that writes those extras.
3. `load.py`: `load_checkpoint` -> weights, model config, tokenizer, data config, for
   generate, evaluate and export.
4. `last.py`: the last-file rule (last.ckpt holds the last good step, never non-finite
   weights) and `TrainingDiverged`.
5. `resume.py`: the checks made before a resume or `init_from` does any work (data plan,
   model shape, tokenizer), and the changed settings a resume applies.
6. `verify.py` and `foreign.py`, run by `contents.read_checkpoint` for every loader: a damaged
   checkpoint (CRC32, non-finite weights) and one packlm did not write or cannot use
   (another program's, another version's) are refused in one line.
"""
