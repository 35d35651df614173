#!/usr/bin/env python3
"""What the best attention kernels in PyTorch reach on the shapes of hydragen's shared-prefix
launch, on this GPU, timed the way `hydragen bench attention` times a point (CUDA events, 256 MB
written before each run, the launch queued behind a device-side wait, median of 30 after 3
warm-ups). Runs on the GPU machine (PyTorch is never a dependency of the product).

  python3 scripts/sdpa-reference.py OUT.json

A shared launch over a prefix of K keys with R query rows per kv head is, per kv head, one
non-causal attention of R queries over K keys: (Hq/Hkv rows per sequence) x (batch). The shapes:
40/40 at batch 1024 (40 heads of 1024 rows), 32/8 (8 heads of 4096), 8/1 (1 head of 8192), at
1K, 2K, 4K and 16K keys, through cuDNN's, FlashAttention's (FA2 in PyTorch) and the
memory-efficient backends of scaled_dot_product_attention, each as a fraction of the bf16
8192^3 matrix product measured in the same run. Also: a D2D copy and a sum over 34 MB-1 GB.
"""
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FLUSH = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")


def median_ms(fn, repeats=30):
    for _ in range(3):
        fn()
    times = []
    for i in range(repeats):
        FLUSH.fill_(i & 0xFF)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(200000)  # the host queues the step while the device waits
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    t = median_ms(lambda: a @ b)
    gemm = 2 * 8192**3 / (t * 1e-3) / 1e12
    out["gemm_tflops"] = gemm
    print(f"gemm 8192^3: {t:.3f} ms, {gemm:.0f} TFLOP/s")
    del a, b
    out["read"] = []
    for mb in [34, 67, 135, 270, 540, 1080]:
        x = torch.randn(mb * 1000000 // 2, device="cuda", dtype=torch.bfloat16)
        y = torch.empty_like(x)
        ts, tc = median_ms(lambda: x.sum(dtype=torch.float32)), median_ms(lambda: y.copy_(x))
        out["read"].append({"mb": mb, "sum_ms": ts, "copy_ms": tc})
        print(f"{mb:5d} MB: sum {ts * 1e3:7.1f} us {mb * 1e6 / (ts * 1e-3) / 1e12:.2f} TB/s | "
              f"copy {tc * 1e3:7.1f} us {2 * mb * 1e6 / (tc * 1e-3) / 1e12:.2f} TB/s (read + written)")
        del x, y
    out["sdpa"] = []
    backends = [(SDPBackend.CUDNN_ATTENTION, "cudnn"), (SDPBackend.FLASH_ATTENTION, "flash"),
                (SDPBackend.EFFICIENT_ATTENTION, "efficient")]
    for name, heads, rows in [("40/40 B=1024", 40, 1024), ("32/8 B=1024", 8, 4096), ("8/1 B=1024", 1, 8192)]:
        for keys in [1024, 2048, 4096, 16384]:
            q = torch.randn(1, heads, rows, 128, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, heads, keys, 128, device="cuda", dtype=torch.bfloat16)
            v = torch.randn_like(k)
            flops = 4 * heads * rows * keys * 128
            row = {"shape": name, "keys": keys, "flops": flops}
            for backend, label in backends:
                try:
                    with sdpa_kernel(backend):
                        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v))
                    row[label + "_ms"] = ms
                    row[label + "_of_gemm"] = flops / (ms * 1e-3) / 1e12 / gemm
                except RuntimeError as error:  # a backend that does not take the shape
                    row[label + "_ms"] = None
                    row[label + "_error"] = str(error)[:160]
            out["sdpa"].append(row)
            print(name, keys, " ".join(
                f"{label} {row[label + '_ms'] * 1e3:.1f} us ({row[label + '_of_gemm']:.2f})" if row[label + "_ms"]
                else f"{label} -" for _, label in backends))
    with open(sys.argv[1], "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main()
