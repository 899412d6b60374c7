"""What `train(cfg)` needs besides building data and model (imported by module, no re-exports:
`packlm.config` imports `trainer_config` while the others import `packlm.config`).

1. `trainer_config.py`: the `trainer` config group, every `lightning.Trainer` argument from
   its signature, type-checked; the ones packlm sets are refused with the reason.
   `precision.py`: what `trainer.precision=auto` becomes here (bf16 measured on a CPU).
   `allocator.py`: freed memory kept for the next step (glibc's malloc thresholds).
2. `checkpoint_contents.py`: what packlm adds to a checkpoint (KEY) and its tokenizer read
   back, without Lightning (generate, evaluate, export, resume).
   `resume.py`: ckpt_path / init_from -> the run it belongs to, its checkpoint read once,
   every setting that must match checked (data plan, model shape, tokenizer), the changed
   settings a resume applies listed.
3. `loggers.py`: the `logger` and `callbacks` groups -> Lightning loggers and callbacks.
4. `report.py`: the model's size, the final summary, Lightning's tips kept out.
5. `ddp_hydra.py`: one job of a sweep launches its own ranks and cleans up after them.
"""
