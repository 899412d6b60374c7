"""The notebooks are stored with their outputs (a student browsing the repository sees the
figures and tables), run top to bottom without error, and their stored outputs are current:
a fresh run gives the same outputs, cell by cell.

The outputs are stored by README's line `jupyter nbconvert --execute --to notebook --inplace
notebooks/*.ipynb` (its kernel runs in notebooks/, where the notebooks import plots.py). Here
each notebook runs with nbclient (what nbconvert's --execute runs) on the `python3` kernel of
ipykernel (no `ipykernel install` needed: jupyter_client falls back to ipykernel's own kernel
spec and starts it with this interpreter) in a temporary folder holding a copy of plots.py,
with the inline backend that draws the figures. They need no network and no ../shared data.

A fresh run is compared with the stored one by the kinds of each cell's outputs (a figure stays
a figure, text stays text) and by their text exactly, the `<Figure size ... with n Axes>` line
of a figure included; a cell tagged `numbers-vary` (a timing, float32 round-off, a trained
loss) is compared with its numbers masked, and the notebooks' scratch folders are masked.
"""

from __future__ import annotations

import copy
import re
import shutil
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook, new_output

FOLDER = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))
TIMEOUT_S = 600  # per cell; a notebook takes 10-30 s on two idle cores (03's sweep the most)
NEEDS = {"04_hf_model": "transformers"}  # an optional extra (packlm[hf]): skipped without it
VARIES = "numbers-vary"  # the cell tag
SCRATCH = re.compile(r"\S*packlm-nb\d\d-\w+")  # tempfile's folder of a notebook, any TMPDIR
NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
FIGURE = re.compile(r"\bplt\.subplots\(")  # a cell that draws (plots.py draws on its axes)
RERUN = "rerun `jupyter nbconvert --execute --to notebook --inplace notebooks/*.ipynb`"


def outputs_of(cell) -> list[tuple[str, str]]:
    """(kind, text) of each output of a code cell: a stream by its name (consecutive pieces
    of one stream joined: where the kernel cuts them depends on timing), a result by its MIME
    types, an error by its name."""
    found: list[tuple[str, str]] = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            kind, text = f"stream {out.name}", out.text
            if found and found[-1][0] == kind:
                text = found.pop()[1] + text
        elif out.output_type in ("display_data", "execute_result"):
            kind, text = " ".join(sorted(out.data)), out.data.get("text/plain", "")
        else:
            kind, text = out.output_type, f"{out.get('ename')}: {out.get('evalue')}"
        found.append((kind, text))
    return found


def comparable(text: str, numbers_vary: bool) -> str:
    text = SCRATCH.sub("<scratch>", text)
    return NUMBER.sub("<n>", text) if numbers_vary else text


def differences(stored, fresh) -> list[str]:
    """Where a fresh run's outputs differ from the stored ones (empty: current)."""
    problems = []
    pairs = zip(stored.cells, fresh.cells, strict=True)
    for i, (old, new) in enumerate(pairs):
        if old.cell_type != "code":
            continue
        varies = VARIES in old.get("metadata", {}).get("tags", [])
        was, now = outputs_of(old), outputs_of(new)
        if [k for k, _ in was] != [k for k, _ in now]:
            problems.append(f"cell {i}: outputs stored {[k for k, _ in was]}, a run gives "
                            f"{[k for k, _ in now]}")  # fmt: skip
            continue
        for (kind, a), (_, b) in zip(was, now, strict=True):
            if comparable(a, varies) != comparable(b, varies):
                problems.append(f"cell {i} ({kind}): stored {a[:300]!r}, a run gives {b[:300]!r}")
    return problems


def storage_problems(nb) -> list[str]:
    """What makes a stored notebook not show what it does: a code cell not run in order, a
    cell that draws without its picture, an error, or warnings and log lines (stderr)."""
    problems = []
    code = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code]
    if counts != list(range(1, len(code) + 1)):
        problems.append(f"execution counts {counts}: not run once, top to bottom")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        kinds = [k for k, _ in outputs_of(cell)]
        if FIGURE.search(cell.source) and not any("image/png" in k for k in kinds):
            problems.append(f"cell {i} draws a figure but stores no image")
        for kind, text in outputs_of(cell):
            if kind in ("error", "stream stderr"):
                problems.append(f"cell {i} stores {kind}: {text[:300]!r}")
    return problems


def test_the_notebooks_are_there():
    assert [p.name for p in NOTEBOOKS] == [
        "01_sampling.ipynb",
        "02_masks_and_counts.ipynb",
        "03_loss_curves.ipynb",
        "04_hf_model.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_is_stored_with_its_outputs(path):
    nb = nbformat.read(path, as_version=4)
    assert storage_problems(nb) == [], RERUN
    shown = [c for c in nb.cells if c.cell_type == "code" and c.outputs]
    assert len(shown) >= 3, f"{path.name}: {len(shown)} cells with outputs"


def test_the_storage_check_catches_cleared_outputs_warnings_and_a_missing_figure():
    nb = nbformat.read(FOLDER / "01_sampling.ipynb", as_version=4)
    cleared = copy.deepcopy(nb)
    for cell in cleared.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    assert any("execution counts" in p for p in storage_problems(cleared))
    assert any("draws a figure" in p for p in storage_problems(cleared))
    warned = copy.deepcopy(nb)
    warned.cells[1].outputs = [new_output("stream", name="stderr", text="TqdmWarning: ...")]
    assert storage_problems(warned) == ["cell 1 stores stream stderr: 'TqdmWarning: ...'"]
    broken = copy.deepcopy(nb)
    broken.cells[3].outputs.append(new_output("error", ename="KeyError", evalue="'x'"))
    assert storage_problems(broken) == ["cell 3 stores error: \"KeyError: 'x'\""]


def _notebook(text: str, picture: bool = True, tags=()):
    outputs = [new_output("stream", name="stdout", text=text)]
    if picture:
        data = {"image/png": "iVBOR", "text/plain": "<Figure size 640x480 with 1 Axes>"}
        outputs.append(new_output("display_data", data=data))
    cell = new_code_cell("print(x)", outputs=outputs, metadata={"tags": list(tags)})
    return new_notebook(cells=[cell])


def test_the_comparison_catches_stale_text_and_a_lost_figure():
    stored = _notebook("mean multiplicity 1.999\n")
    assert differences(stored, _notebook("mean multiplicity 1.999\n")) == []
    assert len(differences(stored, _notebook("mean multiplicity 2.001\n"))) == 1
    assert "outputs stored" in differences(stored, _notebook("mean multiplicity 1.999\n",
                                                             picture=False))[0]  # fmt: skip
    pieces = _notebook("mean ")
    pieces.cells[0].outputs.insert(
        1, new_output("stream", name="stdout", text="multiplicity 1.999\n")
    )
    assert differences(stored, pieces) == []  # one stream cut in two pieces by timing


def test_a_numbers_vary_cell_is_compared_without_its_numbers_and_scratch_folders_never():
    stored = _notebook("sweep done in 12 s: /tmp/packlm-nb03-ab_c1/sweep\n", tags=[VARIES])
    fresh = _notebook("sweep done in 305 s: /tmp/pytest-of-x/t0/packlm-nb03-zz9/sweep\n")
    assert differences(stored, fresh) == []
    assert (
        len(differences(stored, _notebook("sweep failed in 305 s: /tmp/packlm-nb03-q/sweep\n")))
        == 1
    )
    exact = _notebook("loss 3.14 at /tmp/packlm-nb04-aa\n")
    assert differences(exact, _notebook("loss 3.14 at /tmp/t0/packlm-nb04-bb\n")) == []
    assert len(differences(exact, _notebook("loss 3.15 at /tmp/packlm-nb04-aa\n"))) == 1


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_a_notebook_run_gives_its_stored_outputs(path, tmp_path, monkeypatch):
    if path.stem in NEEDS:
        pytest.importorskip(NEEDS[path.stem])
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel's inline backend draws
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny models: 2 threads on busy cores are slower
    monkeypatch.delenv("PACKLM_SWEEP_DIR", raising=False)  # 03 runs its own tiny sweep
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' scratch folders land here
    for helper in FOLDER.glob("*.py"):  # plots.py, beside the notebook as in notebooks/
        shutil.copy(helper, tmp_path / helper.name)
    stored = nbformat.read(path, as_version=4)
    client = NotebookClient(
        copy.deepcopy(stored),
        kernel_name="python3",
        timeout=TIMEOUT_S,
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    start = time.perf_counter()
    fresh = client.execute()  # raises CellExecutionError with the cell and traceback on any error
    print(f"{path.name}: {time.perf_counter() - start:.1f} s")
    assert differences(stored, fresh) == [], RERUN
