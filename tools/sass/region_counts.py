"""Static SASS instruction counts of the sm90 grouped GEMM kernel, by region of the source: no
GPU needed. Copies src/ of a tree to a scratch directory, brackets chosen device functions with
`nanosleep` markers (an instruction ptxas keeps in place and no kernel of ours issues), compiles
one kernel instantiation for sm_90a as the build does (-O3 -DNDEBUG), disassembles it and prints,
per marked function and instance, the instructions between its markers, the kernel's total and
ptxas's registers / spills. A region's count is static (each instruction once); where the
compiler hoists work across a marker the count moves with it, so compare like with like (the
same region in two trees).

    python3 tools/sass/region_counts.py [--src TREE] [--ref TREE] [--elem ElemE4M3]
        [--block-n 128] [--schedule kPingpong] [--cuobjdump PATH] [--ops]

--ref prints a second tree's counts beside (e.g. `git archive main | tar -x -C /tmp/ref`).
cuobjdump: the CUDA toolkit's, or the pip wheel nvidia-cuda-cuobjdump unpacked (its
nvidia/cu13/bin/cuobjdump).
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# file under src/gemm/cuda/kernels: [(function, marker id as a C++ expression)]
REGIONS = {
    "grouped_gemm_epilogue.cuh": [("epilogue_prefetch", "4000"), ("tile_epilogue", "3000"),
                                  ("epilogue_rows_staged", "1000")],
    "grouped_gemm_sm90.cuh": [("main_loop", "2000 + kActive")],
}
NAMES = {4000: "epilogue_prefetch", 3000: "tile_epilogue", 1000: "epilogue_rows_staged",
         2000: "main_loop<kActive=0>", 2001: "main_loop<kActive=1>", 2002: "main_loop<kActive=2>"}


def mark(text: str, name: str, mid: str) -> str:
    """Brackets every definition body of `name` with begin (mid) / end (mid + 500) markers; a
    `return;` inside becomes `{ end; return; }`."""
    out, pos = [], 0
    for m in re.finditer(r"void\s+" + name + r"\s*\(", text):
        if m.start() < pos:
            continue
        i, depth = m.end(), 1
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        j = text.find("{", i)
        if j < 0 or text[i:j].strip() not in ("", "const"):
            continue  # a declaration or a call, not a definition
        k, depth = j + 1, 1
        while depth:
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            k += 1
        begin = f'asm volatile("nanosleep.u32 %0;" :: "n"({mid}));'
        end = f'asm volatile("nanosleep.u32 %0;" :: "n"(({mid}) + 500));'
        body = re.sub(r"\breturn;", "{ " + end + " return; }", text[j + 1:k - 1])
        out.append(text[pos:j + 1] + "\n  " + begin + body + "  " + end + "\n")
        pos = k - 1
    if not out:
        raise SystemExit(f"region_counts: no definition of {name}")
    return "".join(out) + text[pos:]


def marked_tree(src: str, scratch: str) -> str:
    dst = os.path.join(scratch, "src")
    shutil.copytree(os.path.join(src, "src"), dst)
    for f, funcs in REGIONS.items():
        p = os.path.join(dst, "gemm", "cuda", "kernels", f)
        with open(p) as fh:
            t = fh.read()
        for name, mid in funcs:
            t = mark(t, name, mid)
        with open(p, "w") as fh:
            fh.write(t)
    return dst


def compile_and_count(src: str, a) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        inc = marked_tree(src, scratch)
        cu = os.path.join(scratch, "kernel.cu")
        maps = ", ".join(["const __grid_constant__ CUtensorMap"] * 6)
        with open(cu, "w") as fh:
            fh.write('#include "gemm/cuda/kernels/grouped_gemm_sm90.cuh"\n'
                     "namespace tessera::gemm_sm90 {\n"
                     f"template __global__ void grouped_gemm_sm90_kernel<{a.elem}, {a.block_n}, "
                     f"Schedule::{a.schedule}>({maps}, const __grid_constant__ KernelParams);\n}}\n")
        cubin = os.path.join(scratch, "kernel.cubin")
        cmd = [a.nvcc, "-std=c++20", "-arch=sm_90a", "-cubin", "-O3", "-DNDEBUG",
               "-DTESSERA_HAS_CUDA=1", "--expt-relaxed-constexpr", "-Xptxas", "-v",
               f"-I{inc}", f"-I{os.path.join(src, 'include')}", f"-I{a.build_include}", cu,
               "-o", cubin]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"region_counts: nvcc failed\n{r.stderr[-3000:]}")
        ptxas = [re.sub(r"^ptxas (info|warning)\s*:\s*", "", l.strip()) for l in r.stderr.splitlines()
                 if "Used" in l or "spill" in l or "Performance" in l]
        sass = subprocess.run([a.cuobjdump, "-sass", cubin], capture_output=True, text=True,
                              check=True).stdout
    lines = [l.split("*/", 1)[1].strip().rstrip(";").strip() for l in sass.splitlines()
             if re.match(r"^\s+/\*[0-9a-f]+\*/", l)]
    regions, stack = collections.defaultdict(list), []
    for idx, t in enumerate(lines):
        m = re.match(r"(@\S+\s+)?NANOSLEEP\S*\s+(0x[0-9a-f]+|\d+)", t)
        if not m:
            continue
        v = int(m.group(2), 0)
        if v % 1000 < 500:
            stack.append((v, idx))
            continue
        for s in range(len(stack) - 1, -1, -1):
            if stack[s][0] == v - 500:
                begin = stack.pop(s)[1]
                ops = collections.Counter()
                for t2 in lines[begin + 1:idx]:
                    w = t2.split()
                    op = w[1] if w[0].startswith("@") and len(w) > 1 else w[0]
                    if not op.startswith("NANOSLEEP"):
                        ops[op.split(".")[0]] += 1
                regions[v - 500].append(ops)
                break
    total = sum(1 for t in lines if t and not t.startswith("NANOSLEEP"))
    return {"regions": regions, "total": total, "ptxas": ptxas}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="region_counts.py")
    ap.add_argument("--src", default=ROOT)
    ap.add_argument("--ref", default=None)
    ap.add_argument("--elem", default="ElemE4M3")
    ap.add_argument("--block-n", type=int, default=128)
    ap.add_argument("--schedule", default="kPingpong", choices=("kPingpong", "kCooperative"))
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc")
    ap.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump")
    ap.add_argument("--build-include", default=os.path.join(ROOT, "build", "include"),
                    help="the configured build's include directory (tessera/version.h etc.)")
    ap.add_argument("--ops", action="store_true", help="also each region's most frequent opcodes")
    a = ap.parse_args(argv)
    for tool in (a.nvcc, a.cuobjdump):
        if not os.path.exists(tool):
            ap.error(f"{tool} not found (--nvcc / --cuobjdump)")
    trees = [("src", a.src)] + ([("ref", a.ref)] if a.ref else [])
    results = {label: compile_and_count(path, a) for label, path in trees}
    print(f"{a.elem}, block_n {a.block_n}, {a.schedule}: static SASS instructions")
    for label, r in results.items():
        print(f"  {label}: kernel total {r['total']}; ptxas: {'; '.join(r['ptxas'])}")
    for mid in sorted(set().union(*(r["regions"].keys() for r in results.values()))):
        for label, r in results.items():
            counts = [sum(c.values()) for c in r["regions"].get(mid, [])]
            print(f"  {NAMES.get(mid, mid)} [{label}]: {counts}")
            if a.ops:
                for n, c in enumerate(r["regions"].get(mid, [])):
                    print(f"      #{n}: {c.most_common(10)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
