"""Test helpers, one module a job (test modules hold only tests):

- `corpus`: a tiny pseudo-English corpus on disk.
- `runs`: the tiny run's overrides, train.py in a subprocess, checkpoint readers.
- `stores`: small corpora of every source kind, built into stores and decoded back.
- `plan_properties`: random small plans (a hypothesis strategy) and the properties they must have.
- `processes`: which processes of a run are still alive.
- `fault_driver`: train.py in a subprocess with hooks that mark each phase (fault injection).
- `plans`: slow-but-obvious reference implementations of the epoch plan, synthetic stores
  whose token ids are their own store positions.
- `models`: packed rows built by hand and tiny Transformers.

`tests/` is on sys.path (the top conftest.py is rootless), so tests import `helpers.<module>`.
"""
