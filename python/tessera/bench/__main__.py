"""python -m tessera.bench <suite> [options]; suites: train (GroupedLinear / GroupedMLP steps on
CUDA), host (the host cost of an eager step on tiny shapes, CUDA), cpu (BF16 grouped_mm on the
CPU next to torch._grouped_mm), moe (the MoE routing / permute / unpermute / dequantize ops at
DeepSeek-V3 sizes next to torch index_select / index_add_, CUDA)."""
import sys

from . import cpu, host, moe, train


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    suites = {"train": train.main, "host": host.main, "cpu": cpu.main, "moe": moe.main}
    if not argv or argv[0] not in suites:
        print(f"usage: python -m tessera.bench {{{','.join(suites)}}} [options]", file=sys.stderr)
        return 2
    return suites[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
