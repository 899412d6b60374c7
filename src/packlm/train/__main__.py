"""`python -m packlm.train [overrides]`, the same as `python train.py`."""

from packlm.train.job import main

if __name__ == "__main__":
    main()
