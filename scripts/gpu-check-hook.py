#!/usr/bin/env python3
"""The hook on a real GPU through PyTorch (run by scripts/gpu-check-hook.sh
under LD_PRELOAD=libhfhook.so, or without it for the baseline).

Prints one JSON object: what torch.cuda.mem_get_info() reports, how far an
8 GB allocation gets before a CUDA OOM, and the throughput of a matmul
loop. Usage: gpu-check-hook.py SECONDS
"""
import json
import sys
import time

result = {}
try:
    import torch
except ImportError as e:
    print(json.dumps({"skipped": "no PyTorch: %s" % e}))
    sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"skipped": "torch.cuda.is_available() is False"}))
    sys.exit(0)

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
free, total = torch.cuda.mem_get_info()
result["mem_get_info"] = {"free": free, "total": total}

chunks = []
oom = None
try:
    for _ in range(32):  # 32 x 256 MiB = 8 GiB
        chunks.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
except torch.cuda.OutOfMemoryError as e:
    oom = str(e).splitlines()[0][:300]
except RuntimeError as e:
    oom = "RuntimeError: " + str(e).splitlines()[0][:300]
result["allocated_mb"] = len(chunks) * 256
result["oom"] = oom
del chunks
torch.cuda.empty_cache()

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
