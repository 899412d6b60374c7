"""Train packlm: `python train.py [overrides]`, sweeps with `python train.py -m ...`."""

from packlm.train import main

if __name__ == "__main__":
    main()
