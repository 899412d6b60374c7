"""The notebooks run top to bottom without error, and are committed without outputs.

Each notebook is executed with nbclient on the `python3` kernel (ipykernel provides it: no
`ipykernel install` is needed, jupyter_client falls back to ipykernel's own kernel spec and
starts it with this interpreter) in a temporary working directory, with matplotlib's Agg
backend. They need no network and no ../shared data.
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
TIMEOUT_S = 300  # per cell; each notebook takes ~10-20 s on two cores
NEEDS = {"04_hf_model": "transformers"}  # an optional extra (packlm[hf]): skipped without it


def test_the_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == [
        "01_sampling.ipynb",
        "02_masks_and_counts.ipynb",
        "03_loss_curves.ipynb",
        "04_hf_model.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebooks_are_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{path.name} cell {i} has outputs: clear them"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path, tmp_path, monkeypatch):
    if path.stem in NEEDS:
        pytest.importorskip(NEEDS[path.stem])
    monkeypatch.setenv("MPLBACKEND", "Agg")  # the kernel inherits it: no display needed
    monkeypatch.setenv(
        "OMP_NUM_THREADS", "1"
    )  # tiny models: 2 threads on busy shared cores are slower
    monkeypatch.delenv("PACKLM_SWEEP_DIR", raising=False)  # 03 runs its own tiny sweep
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' scratch dirs land here
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError with the cell and traceback on any error
    print(f"{path.name}: {time.perf_counter() - start:.1f} s")
