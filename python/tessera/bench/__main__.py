"""python -m tessera.bench <suite> [options]: the benchmarks of tessera.torch, each next to the
peer a user would pick instead, in the same run.

A suite's module (and with it torch) is imported only when that suite runs, so that `--help`
works where torch is not installed.
"""
import importlib
import sys

# suite: (module, what it times)
SUITES = {
    "train": ("train", "GroupedLinear / GroupedMLP fwd+bwd steps on CUDA next to torch and "
                       "torchao"),
    "host": ("host", "the host cost of an eager step on tiny shapes (CUDA)"),
    "cpu": ("cpu", "BF16 grouped_mm on the CPU next to torch._grouped_mm"),
    "moe": ("moe", "the MoE routing / permute / unpermute / dequantize ops at DeepSeek-V3 sizes "
                   "next to torch index_select / index_add_ (CUDA)"),
    "chart": ("chart", "a bar chart (SVG or PNG) of a cpu or train run's --json rows"),
    "results": ("results_page", "rewrite a suite's section of docs/results.md from its --json rows"),
}


def usage() -> str:
    lines = [f"usage: python -m tessera.bench {{{','.join(SUITES)}}} [options]", "", "suites:"]
    lines += [f"  {name:6s} {text}" for name, (_, text) in SUITES.items()]
    lines += ["", "`python -m tessera.bench <suite> --help` lists a suite's options."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in SUITES:
        if argv:
            print(f"python -m tessera.bench: unknown suite '{argv[0]}'", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    module = importlib.import_module(f".{SUITES[argv[0]][0]}", __package__)
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
