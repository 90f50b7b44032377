"""Does an engine give a request the same greedy reply alone and batched? Counted per arrival shape.

Loads one engine session (as ``python -m harness`` would, from Hydra overrides), replies to three
chat prompts one at a time, then sends the same three together again and again, the second and
third held back by set gaps so that their prefills meet the others' decodes in different steps.
Prints, per gap, how many of the batched tries gave some prompt a reply other than its serial one.

    .venv/bin/python benchmarks/batch_invariance.py backend=vllm backend.max_model_len=1024 \
        backend.cpu_kvcache_space_gib=1 backend.enable_prefix_caching=true [backend.dtype=float32]

Why it exists: ``test_batched_equals_serial[vllm-inprocess]`` failed once in a fresh-clone CI run.
vLLM's CPU kernels are not batch-invariant, and in bf16 "Why is the sky blue?" ties at its
second token (two logits of 17.625; 0.066 apart in fp32): the engine's own numerics, not a request
mixed up by the backend. Here, SmolLM2-135M, 2 cores, vLLM 6 tries per gap: bf16 changed a reply in
13 of 36 tries (6/6 at gaps of 30 and 60 ms), fp32 in 0 of 36, at ~1.7x the time per token.
llama.cpp batched (Q4_1, ``backend.batched=true backend.max_batch_size=4``): 0 of 36; MLX (bf16): 0 of 18.
The suite's vLLM sessions run in fp32 (tests/conftest.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

PROMPTS = ("Tell me about ships.", "Why is the sky blue?", "Name a fruit.")
GAPS_S = ((0, 0, 0), (0, 0.003, 0.006), (0, 0.01, 0.02), (0, 0.03, 0.06), (0, 0.06, 0.12), (0, 0, 0.02))


async def reply(backend, req, delay_s: float = 0.0) -> list[int]:
    from backends import TokenChunk

    await asyncio.sleep(delay_s)
    ids: list[int] = []
    async for event in backend.stream(req):
        if isinstance(event, TokenChunk):
            ids.extend(event.token_ids)
    return ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="+", help="Hydra overrides of the engine, as python -m harness takes them")
    parser.add_argument("--tries", type=int, default=6, help="batched tries per gap")
    parser.add_argument("--tokens", type=int, default=6, help="greedy tokens per reply")
    args = parser.parse_args()

    from backends.base import GenerationRequest
    from core.types import SamplingParams
    from harness.cli import compose_config
    from harness.run.session import EngineSession
    from workloads.prompts import PromptRenderer

    with tempfile.TemporaryDirectory() as workdir:
        session = EngineSession(compose_config("progress=false", *args.overrides), Path(workdir))
        try:
            session.open()
            session.ensure_loaded()
            backend = session.backend
            renderer = PromptRenderer(backend.get_tokenizer())
            reqs = [
                GenerationRequest(
                    request_id=i,
                    prompt_token_ids=renderer.render([{"role": "user", "content": text}]),
                    max_new_tokens=args.tokens,
                    exact_output_len=True,
                    sampling=SamplingParams(),
                )
                for i, text in enumerate(PROMPTS)
            ]
            serial = [session.run(reply(backend, r)) for r in reqs]
            print(f"{'gaps (ms)':<16} {'changed':>8}")
            changed_in_all = 0
            for gaps in GAPS_S:

                async def batched(gaps=gaps):
                    return await asyncio.gather(*(reply(backend, r, d) for r, d in zip(reqs, gaps)))

                changed = sum(session.run(batched()) != serial for _ in range(args.tries))
                changed_in_all += changed
                print(f"{','.join(f'{g * 1000:g}' for g in gaps):<16} {changed:>5}/{args.tries}")
            print(f"changed in {changed_in_all} of {args.tries * len(GAPS_S)} batched tries")
        finally:
            session.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
