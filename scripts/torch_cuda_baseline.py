"""PyTorch's numbers for what runtime/benches/cuda.rs measures, on the same
sizes, so the two tables can be read side by side (run by gpu-check)."""

import time

import torch


def median_seconds(fn, warm=2, reps=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    times.sort()
    return times[len(times) // 2]


def row(what, value, unit, note=""):
    print(f"{what:<44} {value:>10.2f} {unit:<8} {note}")


def matmul_rate(dtype, name, n, note, reps=10):
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)

    def run():
        for _ in range(reps):
            a @ b

    s = median_seconds(run)
    row(f"matmul {name} {n}x{n}x{n}", 2 * n**3 * reps / s / 1e12, "TFLOP/s", note)


def main():
    if not torch.cuda.is_available():
        print("skipping: no CUDA device for PyTorch")
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name()}")
    print(f"{'what':<44} {'value':>10} {'unit':<8} note")
    n = 64 << 20
    host = torch.rand(n // 1024, 1024)
    nbytes = n * 4
    s = median_seconds(lambda: host.cuda())
    row("upload 256 MiB (host -> GPU)", nbytes / s / 1e9, "GB/s", "pageable source, .cuda()")
    dev = host.cuda()
    s = median_seconds(lambda: dev.cpu())
    row("download 256 MiB (GPU -> host)", nbytes / s / 1e9, "GB/s", ".cpu()")
    other = torch.rand(n // 1024, 1024, device="cuda")
    s = median_seconds(lambda: dev + other, 3, 10)
    row("add f32, 64 Mi elements", 3 * nbytes / s / 1e9, "GB/s")
    sq = torch.rand(8192, 8192, device="cuda")
    s = median_seconds(lambda: sq.t().contiguous(), 3, 10)
    row("contiguous() of a transposed 8192^2 f32", 2 * sq.numel() * 4 / s / 1e9, "GB/s")
    s = median_seconds(lambda: dev.exp(), 3, 10)
    row("exp f32, 64 Mi elements", 2 * nbytes / s / 1e9, "GB/s")
    s = median_seconds(lambda: sq.softmax(1), 3, 10)
    row("softmax f32 8192x8192 along rows", 2 * sq.numel() * 4 / s / 1e9, "GB/s")
    s = median_seconds(lambda: sq.sum(1), 3, 10)
    row("sum f32 8192x8192 along rows", sq.numel() * 4 / s / 1e9, "GB/s")
    matmul_rate(torch.float32, "f32", 4096, "allow_tf32 = False")
    torch.backends.cuda.matmul.allow_tf32 = True
    matmul_rate(torch.float32, "f32", 4096, "allow_tf32 = True")
    torch.backends.cuda.matmul.allow_tf32 = False
    matmul_rate(torch.float16, "f16", 4096, "")
    matmul_rate(torch.bfloat16, "bf16", 4096, "")
    matmul_rate(torch.bfloat16, "bf16", 8192, "")
    matmul_rate(torch.float64, "f64", 2048, "")
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    bias = torch.randn(4096, device="cuda", dtype=torch.float16)
    s = median_seconds(lambda: torch.relu(torch.addmm(bias, x, w)), 2, 10)
    row("addmm + relu f16 4096^3", 2 * 4096**3 / s / 1e12, "TFLOP/s", "torch.addmm, torch.relu")
    small = torch.rand(32, 32, device="cuda")

    def adds():
        y = small
        for _ in range(1000):
            y = y + small

    s = median_seconds(adds)
    row("small add (32x32) incl. allocation", s / 1000 * 1e6, "us/op")


if __name__ == "__main__":
    main()
