"""The getting-started notebook runs from top to bottom and ends with the grid-search table."""

import json
import re

import pytest
from conftest import REPO

NOTEBOOK = REPO / "examples" / "notebooks" / "getting_started.ipynb"


def test_notebook_is_committed_without_outputs():
    nb = json.loads(NOTEBOOK.read_text("utf-8"))
    assert nb["nbformat"] == 4
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, cell["source"][:2]


@pytest.mark.real_model
def test_getting_started_notebook_runs(packaged_model, tmp_path, monkeypatch):
    # the Jupyter packages come with the 'test' extra: pip install -e ".[test]"
    nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed (extra 'test')")
    nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed (extra 'test')")
    pytest.importorskip("ipykernel", reason="ipykernel is not installed (extra 'test')")
    pytest.importorskip("pandas", reason="the notebook needs pandas (extra 'test')")

    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    temporary = tmp_path / "tmp"  # the kernel's temporary folders (it inherits TMPDIR)
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))
    client.execute()  # raises CellExecutionError, with the traceback, if a cell fails
    # the kernel has stopped: its feature cache went with it (13 MB a run were left before)
    assert not list(temporary.glob("skbert-*")), list(temporary.iterdir())

    code_cells = [cell for cell in nb.cells if cell.cell_type == "code"]
    for cell in code_cells:
        assert not [out for out in cell.outputs if out.output_type == "error"], cell.source[:60]

    # the estimator cell shows scikit-learn's HTML diagram
    shown = [out for cell in code_cells for out in cell.outputs if "data" in out]
    assert any("sk-estimator" in out.data.get("text/html", "") for out in shown)

    # the last cell's result is the grid-search table: 2 poolings x 2 layer choices, ranked
    (result,) = [out for out in code_cells[-1].outputs if out.output_type == "execute_result"]
    html = result.data["text/html"]
    assert "<table" in html and "mean accuracy" in html and "rank" in html
    body = html.split("<tbody>")[1].split("</tbody>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body, flags=re.S)
    assert len(rows) == 4
    cells = [re.findall(r"<td>(.*?)</td>", row) for row in rows]
    assert sorted(row[0] for row in cells) == ["cls", "cls", "mean", "mean"]
    assert [int(row[4]) for row in cells] == sorted(int(row[4]) for row in cells)
