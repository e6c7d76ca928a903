"""Make installed distributions importable from another virtual environment without downloading them.

Usage: python link_dists.py DEST ROOT...   (run with the interpreter whose environment has them)

Links the closure of ROOT's requirements (markers evaluated for this interpreter, extras followed)
into DEST: each distribution's top-level entries (packages, modules, its .dist-info), so that a
`.pth` file naming DEST in the other environment makes them importable and `pip` counts them as
installed. scripts/test.sh uses it for torch in the `pip install .` venv: the same 2.5 GB of wheels
again over the network was the stage's one way to fail without a defect.
"""
import importlib.metadata as metadata
import pathlib
import sys

from pip._vendor.packaging.requirements import Requirement


def closure(roots):
    seen, todo = {}, [(r, frozenset()) for r in roots]
    while todo:
        name, extras = todo.pop()
        dist = metadata.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen and extras <= seen[key][1]:
            continue
        extras = extras | (seen[key][1] if key in seen else frozenset())
        seen[key] = (dist, extras)
        for line in dist.requires or []:
            req = Requirement(line)
            wanted = req.marker is None or any(
                req.marker.evaluate({"extra": e}) for e in (extras or {""}))
            if wanted:
                todo.append((req.name, frozenset(req.extras)))
    return [d for d, _ in seen.values()]


def main(dest, roots):
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for dist in closure(roots):
        base = pathlib.Path(dist.locate_file(""))
        for top in {pathlib.PurePath(f).parts[0] for f in dist.files or []} - {"..", "__pycache__"}:
            link = dest / top
            if not link.exists():
                link.symlink_to(base / top)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
