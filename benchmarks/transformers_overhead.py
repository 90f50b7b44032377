"""The harness's transformers decode rate against a bare ``model.generate`` loop.

Same process, same model object settings, same prompt, same output length, concurrency 1.
Decode tokens/s is (n_out − 1) / (time of last token − time of first token) for both:
for the bare loop, generate(max_new_tokens=n) and generate(max_new_tokens=1) are timed and
the difference is the decode time of n − 1 tokens.

    .venv/bin/python benchmarks/transformers_overhead.py [--model smollm2-135m] [--output-len 64] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import torch
from transformers import AutoModelForCausalLM

from backends import GenerationRequest, TokenChunk
from backends.engines.transformers import TransformersConfig
from backends.registry import backend_registry
from harness.config import ModelConfig
from harness.run.model_store import resolve_model
from workloads.prompts import PromptRenderer

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def bare_decode_tps(model, ids: list[int], n: int, eos: list[int]) -> float:
    input_ids = torch.tensor([ids])
    attention = torch.ones_like(input_ids)
    common = dict(do_sample=False, pad_token_id=eos[0], eos_token_id=eos, temperature=None, top_p=None, top_k=None)
    with torch.inference_mode():
        t = time.perf_counter()
        model.generate(input_ids=input_ids, attention_mask=attention, max_new_tokens=1, min_new_tokens=1, **common)
        prefill = time.perf_counter() - t
        t = time.perf_counter()
        out = model.generate(
            input_ids=input_ids, attention_mask=attention, max_new_tokens=n, min_new_tokens=n, **common
        )
        full = time.perf_counter() - t
    assert out.shape[1] - len(ids) == n
    return (n - 1) / (full - prefill)


def harness_decode_tps(backend, ids: list[int], n: int) -> float:
    async def one() -> list[float]:
        request = GenerationRequest(request_id=0, prompt_token_ids=ids, max_new_tokens=n, exact_output_len=True)
        return [e.t async for e in backend.stream(request) if isinstance(e, TokenChunk)]

    times = asyncio.run(one())
    assert len(times) == n
    return (n - 1) / (times[-1] - times[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    files = resolve_model(ModelConfig(name=args.model))
    backend = backend_registry.get("transformers").cls(TransformersConfig(), files)
    backend.load()
    ids = PromptRenderer(backend.get_tokenizer()).render([{"role": "user", "content": PROMPT}])
    bare_model = AutoModelForCausalLM.from_pretrained(files.hf_dir, dtype=torch.float32).eval()
    eos = backend._eos_ids

    harness_decode_tps(backend, ids, 8)  # warm both paths
    bare_decode_tps(bare_model, ids, 8, eos)
    bare, ours = [], []
    for _ in range(args.repeats):  # interleaved, so drift on a busy machine hits both
        bare.append(bare_decode_tps(bare_model, ids, args.output_len, eos))
        ours.append(harness_decode_tps(backend, ids, args.output_len))
    backend.close()
    b, h = statistics.median(bare), statistics.median(ours)
    print(
        f"model {args.model}, prompt {len(ids)} tokens, {args.output_len} output tokens, {args.repeats} repeats, torch threads {torch.get_num_threads()}"
    )
    print(f"bare model.generate decode: {b:.1f} tok/s (median; runs {', '.join(f'{v:.1f}' for v in bare)})")
    print(f"harness transformers decode: {h:.1f} tok/s (median; runs {', '.join(f'{v:.1f}' for v in ours)})")
    print(f"ratio harness / bare: {h / b:.3f}")


if __name__ == "__main__":
    main()
