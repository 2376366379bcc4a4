"""Activations collected inside vLLM against vLLM alone and against hookscope.extract on the HF model.

    .venv-vllm/bin/python benchmarks/serving.py [--rounds 3] [--prompts 16] [--new 32] [--out DIR]

Runs in the vLLM venv (``make test-vllm`` builds it). The tests' tiny Llama (2 layers, hidden 128),
saved once; ``--prompts`` prompts of 8 to 23 tokens, greedy, ``--new`` new tokens each, in process,
``enforce_eager=True``. Each round, one after the other:

- ``vllm``: ``llm.generate`` alone;
- ``capture``: the same ``generate`` inside ``hookscope.capture_llm(llm, out=store)``: every decoder
  layer's output (``residual``, ``out[0]``, ``out[1]``) per request, streamed to a fresh store;
- ``extract``: ``hookscope.extract`` of the same decoder layers of transformers' ``LlamaForCausalLM``
  (same weights) over the same token sequences (what vLLM fed: prompt and generated tokens, one
  sequence a batch), to a fresh store.

Throughput is the tokens whose activations are produced, per second: the prompt and fed tokens of
every request (the same count in the three). The table gives each one's median over rounds and the
ratio of ``capture`` to the other two. Results go to docs/guide/serving.md by hand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.serving.tiny: the tests' model

import torch

import hookscope


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--out", type=Path, default=None)
    options = parser.parse_args()
    warnings.simplefilter("ignore")
    from tests.serving.tiny import in_process_llm, save_tiny
    from vllm import SamplingParams

    work = Path(options.out or tempfile.mkdtemp(prefix="hookscope-serving-"))
    folder = save_tiny(work / "tiny") if not (work / "tiny" / "config.json").is_file() else work / "tiny"
    llm = in_process_llm(folder)
    g = torch.Generator().manual_seed(0)
    prompts = [{"prompt_token_ids": [1, *torch.randint(3, 256, (7 + i % 16,), generator=g).tolist()]}
               for i in range(options.prompts)]  # fmt: skip
    params = SamplingParams(max_tokens=options.new, temperature=0, ignore_eos=True)
    tokens = sum(len(p["prompt_token_ids"]) + options.new - 1 for p in prompts)
    hf, sequences = None, []
    times: dict[str, list[float]] = {"vllm": [], "capture": [], "extract": []}
    for round_ in range(options.rounds + 1):  # round 0 warms up, and is not counted
        start = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        bare = time.perf_counter() - start
        store = work / "capture.hookscope"
        start = time.perf_counter()
        with hookscope.capture_llm(llm, out=store, force=True):
            llm.generate(prompts, params, use_tqdm=False)
        captured = time.perf_counter() - start
        if hf is None:
            hf = _hf(folder)
            sequences = [torch.tensor([p["prompt_token_ids"] + list(o.outputs[0].token_ids)[:-1]])
                         for p, o in zip(prompts, outputs, strict=True)]  # fmt: skip
        start = time.perf_counter()
        hookscope.extract(hf, sequences, select="re:model\\.layers\\.\\d+", out=work / "extract.hookscope", force=True,
                          progress=False)  # fmt: skip
        extracted = time.perf_counter() - start
        if round_:
            for name, took in (("vllm", bare), ("capture", captured), ("extract", extracted)):
                times[name].append(took)
    _table(times, tokens, options)
    if options.out is None:
        shutil.rmtree(work, ignore_errors=True)


def _hf(folder: Path) -> torch.nn.Module:
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def _table(times: dict[str, list[float]], tokens: int, options: argparse.Namespace) -> None:
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"{options.prompts} prompts, {options.new} new tokens each, {tokens} tokens, {options.rounds} rounds "
          f"(torch threads: {torch.get_num_threads()})")  # fmt: skip
    print(f"{'run':<9}{'median s':>10}{'tokens/s':>10}{'capture /':>11}")
    for name, took in median.items():
        print(f"{name:<9}{took:>10.3f}{tokens / took:>10.0f}{median['capture'] / took:>11.2f}")


if __name__ == "__main__":
    main()
