"""What the expert-parallel GPU scripts (ep_bench.py, ep_dist_bench.py, ep_dispatch_profile.py)
share: the DSv3-like sizes as command-line options, and the NCCL process group of a torchrun
rank (or of a lone process: rank 0 of 1)."""
import argparse
import os

import torch
import torch.distributed as dist


def size_args(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """--tokens (per rank) 4096, --hidden 7168, --ffn 2048, --experts 256, --top-k 8."""
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--top-k", type=int, default=8)
    return p


def init_nccl() -> torch.device:
    """This rank's GPU (LOCAL_RANK, 0 without torchrun) with the NCCL group initialized."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    return torch.device("cuda", local)
