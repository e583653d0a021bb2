#!/usr/bin/env python3
"""The hook on a real GPU through PyTorch (run by scripts/gpu-check-hook.sh
under LD_PRELOAD=libhfhook.so, or without it for the baseline).

Prints one JSON object: the allocator (PYTORCH_CUDA_ALLOC_CONF), what
torch.cuda.mem_get_info() reports, whether an allocation of half the quota
succeeds, how far 256 MiB allocations get before a CUDA OOM (up to twice the
quota, or 8 GiB without one), the verdicts on those against the quota
(HETEROFLOW_SLICE_MEMORY_MB, when set), and the throughput of a matmul loop.
Where PyTorch cannot be imported or sees no GPU it prints {"skipped": ...}
and exits 0: the check says so instead of failing.

Usage: gpu-check-hook.py SECONDS
"""
import json
import os
import sys
import time

MIB = 1 << 20
CHUNK_MB = 256


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install's own error
        print(json.dumps({"skipped": "torch not importable: %s" % e}))
        return
    if not torch.cuda.is_available():
        print(json.dumps({"skipped": "torch.cuda.is_available() is False"}))
        return

    quota_env = os.environ.get("HETEROFLOW_SLICE_MEMORY_MB")
    quota_mb = int(quota_env) if quota_env and quota_env.isdigit() else None
    result = {
        "torch": torch.__version__,
        "allocator": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "native"),
        "quota_mb": quota_mb,
    }
    free, total = torch.cuda.mem_get_info()
    result["mem_get_info"] = {"free": free, "total": total}

    within = None
    if quota_mb:
        # Half the quota in one tensor: must fit.
        try:
            t = torch.empty((quota_mb // 2) * MIB, dtype=torch.uint8,
                            device="cuda")
            within = True
            del t
        except RuntimeError as e:  # torch.cuda.OutOfMemoryError included
            within = False
            result["within_quota_error"] = str(e).splitlines()[0][:300]
        torch.cuda.empty_cache()

    limit_mb = 2 * quota_mb if quota_mb else 8192
    chunks = []
    oom = None
    try:
        for _ in range(limit_mb // CHUNK_MB):
            chunks.append(torch.empty(CHUNK_MB * MIB, dtype=torch.uint8,
                                      device="cuda"))
    except torch.cuda.OutOfMemoryError as e:
        oom = str(e).splitlines()[0][:300]
    except RuntimeError as e:
        oom = "RuntimeError: " + str(e).splitlines()[0][:300]
    result["allocated_mb"] = len(chunks) * CHUNK_MB
    result["oom"] = oom
    del chunks
    torch.cuda.empty_cache()

    if quota_mb:
        checks = {
            "mem_get_info_shows_quota": total == quota_mb * MIB,
            "within_quota_succeeds": within is True,
            "beyond_quota_raises_oom":
                oom is not None and result["allocated_mb"] <= quota_mb,
        }
        result["checks"] = checks
        result["ok"] = all(checks.values())

    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    start = time.time()
    n = 0
    while time.time() - start < seconds:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        n += 10
    result["matmul_per_s"] = n / (time.time() - start)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
