"""Configuration: what a user can set, each key and default written once, checked before work.

1. `group.py`: `ConfigGroup`, the base of every group: from a mapping, unknown keys named.
2. `data.py`, `tokenizer.py`, `model.py` (model + optim), `trainer.py`: the groups' dataclasses;
   `data_checks.py` and `sources.py` (one `data.sources` entry) hold the data group's rules.
3. `schema.py`: `PackLMConfig`, every group registered in Hydra's ConfigStore; `validate_config`.
4. `help.py`: `--help` of every command, from the fields' docstrings.
5. `precision.py`: what `trainer.precision=auto` means on this machine (the one part needing torch).

Nothing here imports the data path, the model or Lightning, so composing a config is quick
and every part below can read its own group.
"""
