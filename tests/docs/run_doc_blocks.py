"""Compiles and runs the C and C++ code of docs/*.md exactly as written, against an installed
tessera (scripts/test.sh: the installed package stage). Run by scripts/test.sh:

    python tests/docs/run_doc_blocks.py <install prefix> [docs/*.md ...]

What a fenced block's info string (its first word is the language, as GitHub highlights it) means:

    ```cpp file=quickstart.cpp    a whole file: written, under that name, to the page's work dir
    ```cmake file=CMakeLists.txt  (any language; later blocks of the page see the earlier files)
    ```sh run                     commands: run by bash -e in the page's work dir, with $HOME a
                                  temporary directory whose tessera/ is the installed prefix (the
                                  pages install to $HOME/tessera)
    ```output                     what the `sh run` block before it prints last (its stdout ends
                                  with these lines)
    ```cpp excerpt                a piece of a larger program: not compiled

Every c / cpp block must be a file or an excerpt, and every file must be named by a `sh run`
block of its page: a program on a page is compiled and run. Python blocks are pytest's
(tests/python/test_doc_blocks.py). Exit status 0 when every page's blocks ran as written.
"""
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
COMPILED_LANGUAGES = {"c", "cpp"}


class Block:
    def __init__(self, page, line, info, text):
        words = info.split()
        self.page, self.line, self.text = page, line, text
        self.language = words[0] if words else ""
        self.file = next((w[len("file="):] for w in words if w.startswith("file=")), None)
        self.run = words[1:] == ["run"] and self.language == "sh"
        self.excerpt = "excerpt" in words[1:]
        self.output = self.language == "output"

    def where(self):
        return f"{os.path.relpath(self.page, ROOT)}:{self.line}"


def blocks(page):
    text = open(page).read()
    return [Block(page, text.count("\n", 0, m.start()) + 1, m.group(1).strip(), m.group(2))
            for m in FENCE.finditer(text)]


def check_page(page_blocks):
    """The page's rules (see the module comment); a list of problems."""
    problems = []
    runs = " ".join(b.text for b in page_blocks if b.run)
    for i, b in enumerate(page_blocks):
        if b.language in COMPILED_LANGUAGES and not (b.file or b.excerpt):
            problems.append(f"{b.where()}: a ```{b.language} block is neither a whole file "
                            "(file=NAME) nor marked `excerpt`")
        if b.language in COMPILED_LANGUAGES and b.file and b.file not in runs:
            problems.append(f"{b.where()}: {b.file} is named by no ```sh run block of the page")
        if b.output and (i == 0 or not page_blocks[i - 1].run):
            problems.append(f"{b.where()}: an ```output block follows no ```sh run block")
    return problems


def run_page(page_blocks, prefix, home):
    """Writes the page's files and runs its commands in order; a list of problems."""
    problems = []
    with tempfile.TemporaryDirectory(prefix="doc-") as work:
        for i, b in enumerate(page_blocks):
            if b.file:
                with open(os.path.join(work, b.file), "w") as f:
                    f.write(b.text)
            if not b.run:
                continue
            env = {**os.environ, "HOME": home}
            r = subprocess.run(["bash", "-e", "-c", b.text], cwd=work, env=env,
                               capture_output=True, text=True, timeout=900)
            print(f"{b.where()}: exit {r.returncode}: {b.text.strip()}")
            if r.returncode != 0:
                problems.append(f"{b.where()}: exit status {r.returncode}\n{r.stdout}{r.stderr}")
                continue
            nxt = page_blocks[i + 1] if i + 1 < len(page_blocks) else None
            if nxt is not None and nxt.output and not r.stdout.endswith(nxt.text):
                problems.append(f"{nxt.where()}: the commands printed\n{r.stdout[-2000:]}"
                                f"which does not end with the page's\n{nxt.text}")
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    prefix = os.path.abspath(argv[1])
    docs = os.path.join(ROOT, "docs")
    pages = argv[2:] or sorted(os.path.join(docs, p) for p in os.listdir(docs) if p.endswith(".md"))
    problems, programs = [], 0
    with tempfile.TemporaryDirectory(prefix="doc-home-") as home:
        os.symlink(prefix, os.path.join(home, "tessera"))
        for page in pages:
            page_blocks = blocks(page)
            found = check_page(page_blocks)
            problems += found
            if not found:
                problems += run_page(page_blocks, prefix, home)
            programs += sum(1 for b in page_blocks if b.language in COMPILED_LANGUAGES and b.file)
    for p in problems:
        print(f"run_doc_blocks: FAILED: {p}")
    if problems:
        return 1
    if programs == 0:
        print("run_doc_blocks: FAILED: no C or C++ program found in the pages")
        return 1
    print(f"run_doc_blocks: {programs} C/C++ programs of {len(pages)} pages compiled and run as "
          "written")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
