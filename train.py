"""Train packlm: `python train.py [overrides]`, sweeps with `python train.py -m ...`."""

from packlm.runtime.interrupt import quiet_ctrl_c

quiet_ctrl_c()  # first: a Ctrl-C while torch and Lightning import is one line, no traceback

from packlm.train import main  # noqa: E402

if __name__ == "__main__":
    main()
