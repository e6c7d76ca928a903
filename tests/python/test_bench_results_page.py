"""python -m tessera.bench results: a suite's section of the results page is rewritten from a
run's JSON rows (the suite's own table), nothing outside its markers changes, and a page without
exactly one pair of markers is refused untouched. The committed docs/results.md holds each
generated section's markers once."""
import json
import os
import subprocess
import sys

import pytest

from tessera.bench import results_page

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
CPU_ROW = {"shape": "8x64x128x128", "imbalanced": True, "op": "wgrad", "torch_ms": 2.0,
           "tessera_ms": 1.0, "torch_gflops": 100.0, "tessera_gflops": 200.0, "x_torch": 2.0,
           "torch_again": 1.0, "torch_rel_err": 1e-3, "tessera_rel_err": 2e-3}
PAGE = """# Results
before
<!-- tessera.bench cpu: begin -->
old table
<!-- tessera.bench cpu: end -->
after
"""


def test_section_rewritten_from_rows_only_between_markers(tmp_path):
    page, rows = tmp_path / "results.md", tmp_path / "rows.json"
    page.write_text(PAGE)
    rows.write_text(json.dumps([CPU_ROW]))
    r = subprocess.run([sys.executable, "-m", "tessera.bench", "results", str(page), "cpu",
                        str(rows), "--note", "a note"], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert r.returncode == 0, r.stderr
    text = page.read_text()
    assert "old table" not in text
    assert text.startswith("# Results\nbefore\n<!-- tessera.bench cpu: begin -->\na note\n")
    assert text.endswith("<!-- tessera.bench cpu: end -->\nafter\n")
    assert "| 8x64x128x128 | imb | wgrad | 2.0 | 1.0 | 100 | 200 | 2.00 | 1.00 |" in text


@pytest.mark.parametrize("page", [PAGE.replace("<!-- tessera.bench cpu: end -->\n", ""),
                                  PAGE + "<!-- tessera.bench cpu: begin -->\n",
                                  PAGE.replace("cpu: begin", "X").replace("cpu: end",
                                                                          "cpu: begin").replace(
                                      "X", "cpu: end")])
def test_bad_markers_are_refused_and_the_page_is_untouched(tmp_path, page):
    path = tmp_path / "results.md"
    path.write_text(page)
    with pytest.raises(ValueError, match="marker|comes before"):
        results_page.write_section(str(path), "cpu", [CPU_ROW])
    assert path.read_text() == page


def test_unknown_suite_and_empty_rows_are_refused(tmp_path):
    path = tmp_path / "results.md"
    path.write_text(PAGE)
    with pytest.raises(ValueError, match="suite"):
        results_page.write_section(str(path), "gpu", [CPU_ROW])
    with pytest.raises(ValueError, match="no rows"):
        results_page.write_section(str(path), "cpu", [])


def test_the_committed_page_holds_each_generated_section_once():
    with open(os.path.join(ROOT, "docs", "results.md")) as f:
        text = f.read()
    for suite in results_page.TABLES:
        for m in results_page.markers(suite):
            assert text.count(m) == 1, m
