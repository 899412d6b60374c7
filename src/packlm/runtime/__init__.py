"""How packlm's processes run, for every part that starts or hosts one.

1. `workers.py`: worker processes (fork or spawn, die with the parent, a dead worker is an
   error, Ctrl-C left to the parent), for the tokenizer's counting, the store's encoding and
   the DataLoader.
2. `lock_files.py`: lock files that record their owner, and whether that owner is alive (the
   cache's entry locks and the run folder's lock).
3. `run_folder.py`: the folder a run writes into, made and probed before anything is written.
4. `shims.py`: the one module that touches private names of torch and Lightning.
"""
