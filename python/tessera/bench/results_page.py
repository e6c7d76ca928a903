"""The benchmarks write their own section of the results page (docs/results.md): a run's JSON rows
(`python -m tessera.bench cpu|train --json ROWS.json`, wherever it ran: a GPU machine sends the
JSON back) become the section's table, between two markers the page holds once each:

    <!-- tessera.bench cpu: begin -->  ...generated...  <!-- tessera.bench cpu: end -->

    python -m tessera.bench results docs/results.md cpu ROWS.json [--note TEXT]

Nothing outside the markers changes; the page is rewritten whole or not at all.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Callable, Dict, List


def _cpu_table(rows: List[dict]) -> str:
    from .cpu import format_table
    return format_table(rows)


def _train_table(rows: List[dict]) -> str:
    from .train import format_table
    return format_table(rows)


# suite -> its table from rows (the suites' own formatting: the page shows what the run printed)
TABLES: Dict[str, Callable[[List[dict]], str]] = {"cpu": _cpu_table, "train": _train_table}


def markers(suite: str) -> tuple:
    return (f"<!-- tessera.bench {suite}: begin -->", f"<!-- tessera.bench {suite}: end -->")


def replace_section(text: str, suite: str, body: str) -> str:
    """`text` with the lines between `suite`'s markers replaced by `body`."""
    begin, end = markers(suite)
    for m in (begin, end):
        if text.count(m) != 1:
            raise ValueError(f"results page: the marker {m!r} must appear exactly once, found "
                             f"{text.count(m)}")
    i, j = text.index(begin) + len(begin), text.index(end)
    if j < i:
        raise ValueError(f"results page: {end!r} comes before {begin!r}")
    return text[:i] + "\n" + body.strip("\n") + "\n" + text[j:]


def write_section(page: str, suite: str, rows: List[dict], note: str = "") -> None:
    if suite not in TABLES:
        raise ValueError(f"results: suite {suite!r} is not one of {sorted(TABLES)}")
    if not rows:
        raise ValueError("results: the JSON holds no rows")
    body = (note.strip() + "\n\n" if note.strip() else "") + TABLES[suite](rows)
    with open(page) as f:
        text = replace_section(f.read(), suite, body)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(page)), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, page)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tessera.bench results")
    ap.add_argument("page", help="the results page (docs/results.md)")
    ap.add_argument("suite", choices=sorted(TABLES))
    ap.add_argument("rows", help="the JSON the suite wrote (--json)")
    ap.add_argument("--note", default="", help="a line above the table: machine, date, command")
    a = ap.parse_args(argv)
    with open(a.rows) as f:
        rows = json.load(f)
    write_section(a.page, a.suite, rows, a.note)
    print(f"{a.page}: section {a.suite!r} rewritten from {len(rows)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
