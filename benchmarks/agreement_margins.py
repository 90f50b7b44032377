"""Why did two engines' greedy replies part? The fp32 logit margin at each first divergence.

    python benchmarks/agreement_margins.py results/agree-…/transformers-fp32 results/agree-…/vllm …

The first folder is the baseline. For every request whose reply in another run parts from the
baseline's, the model (transformers, float32) is run on the prompt plus the common prefix, and
the logits of the two tokens chosen there are compared: a gap of a fraction of a logit is a
near-tie that rounding in another dtype, quantization or kernel can flip (numerics); a large
gap means the other engine was not computing the same thing (template, BOS, weights).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harness.reports import agreement
    from harness.results.store import load_run
    from workloads.prompts import PromptRenderer, chat_messages

    base = load_run(args.runs[0])
    hf_dir = base.summary.model["hf_dir"]
    tok = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    renderer = PromptRenderer(tok)
    sessions = {s["session_id"]: s for s in json.loads((args.runs[0] / "workload.json").read_text())["sessions"]}
    base_rows = {int(r.request_id): r for r in base.requests.itertuples()}
    print(
        "| run | request | position | baseline token | its logit | this run's token | its logit | gap | fp32 rank of this run's token |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for path in args.runs[1:]:
        run = load_run(path)
        for r in run.requests.itertuples():
            b = base_rows.get(int(r.request_id))
            if b is None or r.output_token_ids is None or b.output_token_ids is None:
                continue
            a_ids, o_ids = [int(x) for x in b.output_token_ids], [int(x) for x in r.output_token_ids]
            pos = agreement.common_prefix(a_ids, o_ids)
            if a_ids == o_ids or pos >= min(len(a_ids), len(o_ids)):
                continue  # identical, or one stopped early (no token to weigh against)
            session = sessions[int(b.session_id)]
            turn = session["turns"][int(b.turn)]
            ids = turn.get("prompt_token_ids") or renderer.render(
                chat_messages(session.get("system"), [{"role": "user", "content": turn["user"]}])
            )
            with torch.no_grad():
                logits = model(torch.tensor([ids + a_ids[:pos]])).logits[0, -1]
            la, lo = float(logits[a_ids[pos]]), float(logits[o_ids[pos]])
            rank = int((logits > logits[o_ids[pos]]).sum())
            print(
                f"| {path.name} | {r.request_id} | {pos} | {tok.decode([a_ids[pos]])!r} | {la:.3f} | "
                f"{tok.decode([o_ids[pos]])!r} | {lo:.3f} | {la - lo:.3f} | {rank} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
