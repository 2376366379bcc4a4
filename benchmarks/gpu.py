"""The GPU benchmark, one prepared script: ResNet-18 on CUDA, every leaf output, kept on the GPU or
copied to the host; forward + backward with every conv's output and gradient; a training step under
``watch`` (statistics on the device) and ``extract`` throughput (``benchmarks/gpu_training.py``).

    python benchmarks/gpu.py                         # needs a CUDA GPU; hookscope's own environment is enough
    python benchmarks/gpu.py --quick                 # fewer rounds
    python benchmarks/gpu.py --device cpu --quick    # the watch and extract cases, small, on the CPU

What it shows: ``capture(..., device="cpu")`` copies into pinned host memory on a side stream, so the
forward pass does not wait for each copy, against hand-written hooks that call ``.to("cpu")`` (the
host waits for the GPU at every hook). It also checks that the host copies equal the GPU values.
Each run ends with ``torch.cuda.synchronize()``; memory is ``torch.cuda.max_memory_allocated``
above what was allocated before the run (GPU memory; pinned host buffers are not counted).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torchvision
from torch import Tensor, nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness
import hookscope
import tools
from gpu_training import extract_throughput, watch_steps


def synchronized(run: Callable[[], Any]) -> harness.Run:
    def call() -> Any:
        out = run()
        torch.cuda.synchronize()
        return out

    return call


def cuda_peak_mb(run: harness.Run) -> float:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = run()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak / 1e6


def hand_to_host(model: nn.Module, names: list[str]) -> Callable[[Tensor], Any]:
    """What one writes without a library: ``.to("cpu")`` in the hook (the host waits each time)."""
    chosen = tools.modules(model, names)

    def run(x: Tensor) -> dict[str, list[Tensor]]:
        store: dict[str, list[Tensor]] = {n: [] for n in names}
        handles = [
            m.register_forward_hook(lambda mod, a, out, n=n: store[n].append(out.detach().to("cpu"))) for n, m in chosen
        ]
        try:
            model(x)
        finally:
            for h in handles:
                h.remove()
        return store

    return run


def leaves(batch: int, rounds: int) -> list[harness.Row]:
    torch.manual_seed(0)
    model = torchvision.models.resnet18().cuda().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    names = tools.leaf_names(model)
    runners = {
        "hookscope (kept on the GPU)": tools.hookscope_forward(model, None),
        "hand-written clone hooks (GPU)": tools.hand_forward(model, names),
        'hookscope device="cpu" (pinned, side stream)': tools.hookscope_forward(model, None, device="cpu"),
        'hand-written .to("cpu") hooks': hand_to_host(model, names),
    }
    check_host_copies(runners['hookscope device="cpu" (pinned, side stream)'], x)

    def bind(run: Callable[[Tensor], Any]) -> harness.Run:
        def call() -> Any:
            with torch.no_grad():
                return run(x)

        return synchronized(call)

    return harness.measure(
        f"CUDA ResNet-18 every leaf, b{batch}",
        bind(model),
        {name: bind(run) for name, run in runners.items()},
        rounds=rounds,
        unpack=tools.unpack,
        peak=cuda_peak_mb,
    )


def convs(batch: int, rounds: int) -> list[harness.Row]:
    torch.manual_seed(0)
    model = torchvision.models.resnet18().cuda().eval()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Conv2d)]

    def loss(out: Tensor) -> Tensor:
        return out.sum()

    def host(x: Tensor) -> hookscope.Capture:
        with hookscope.capture(model, nn.Conv2d, kinds=("output", "grad_output"), device="cpu") as cap:
            loss(model(x)).backward()
        return cap

    runners = {
        "hookscope (kept on the GPU)": tools.hookscope_backward(model, nn.Conv2d, loss),
        "hand-written tensor hooks (GPU)": tools.hand_backward(model, names, loss),
        'hookscope device="cpu"': host,
    }
    return harness.measure(
        f"CUDA ResNet-18 fwd+bwd every conv out+grad, b{batch}",
        synchronized(lambda: loss(model(x)).backward()),
        {name: synchronized(lambda run=run: run(x)) for name, run in runners.items()},
        rounds=rounds,
        unpack=tools.unpack,
        peak=cuda_peak_mb,
    )


def check_host_copies(run: Callable[[Tensor], Any], x: Tensor) -> None:
    """The host copies equal the GPU values, the in-place ReLU after bn1 notwithstanding."""
    model_out = {}
    with torch.no_grad():
        cap = run(x)
        model = cap.model
        model_out["bn1"] = model.bn1(model.conv1(x)).cpu()
    kept = cap["bn1"].output
    if kept.device.type != "cpu" or not kept.is_pinned():
        raise SystemExit(f"host copy is on {kept.device}, pinned={kept.is_pinned()}: expected pinned CPU memory")
    if not torch.allclose(kept, model_out["bn1"], rtol=1e-4, atol=1e-5):
        raise SystemExit("host copy differs from the GPU value of bn1 (rewritten by the in-place ReLU?)")
    print("check: host copies are pinned and equal the GPU values (bn1, before the in-place ReLU)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: the watch and extract cases, small, to check the script")  # fmt: skip
    args = parser.parse_args(argv)
    rounds = 5 if args.quick else 20
    if args.device == "cpu":
        rows = watch_steps("cpu", 1, batch=2, side=32) + extract_throughput("cpu", 1, batch=2, side=32, count=2)
        print(harness.table(rows))
        return 0
    if not torch.cuda.is_available():
        print("gpu.py needs a CUDA GPU; none is visible here", file=sys.stderr)
        return 2
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, hookscope {hookscope.__version__}")
    rows: list[harness.Row] = []
    for batch in (8, 64):
        rows += leaves(batch, rounds)
    rows += convs(32, rounds)
    rows += watch_steps("cuda", rounds)
    rows += extract_throughput("cuda", max(3, rounds // 4))
    print(harness.table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
