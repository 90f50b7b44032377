"""``/metrics`` of the reference server: Prometheus histograms of what it served, and its own lateness.

Gauges that move with the load, in the dialect's names (vLLM's, or SGLang's for ``--dialect sglang``):
requests running and waiting (``--max-running``: more wait for a slot), and a KV-cache use, the
reply tokens the running requests reserve ÷ ``--kv-capacity-tokens`` (0..1, as vLLM's
``kv_cache_usage_perc``). With ``--spec-draft-tokens K`` every chunk written counts as one
verification of K draft tokens, of which a share ``--spec-acceptance`` is accepted
(deterministically: the running total of accepted tokens is ⌊P · K · drafts⌋, each draft's
accepted ones at its first positions), in vLLM's ``spec_decode_*`` counters, or for
``--dialect sglang`` in SGLang's gauges ``spec_accept_rate`` and ``spec_accept_length`` (over the
whole run so far).
"""

from __future__ import annotations

from typing import Optional

TTFT_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)

ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)

E2E_BUCKETS = (0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 30.0, 60.0)

LATENESS_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)


class PromHistogram:
    def __init__(self, name: str, help_text: str, bounds: tuple[float, ...]):
        self.name, self.help, self.bounds = name, help_text, bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += times
                break
        else:
            self.counts[-1] += times
        self.sum += value * times
        self.count += times

    def render(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        cumulative = 0
        for bound, n in zip(self.bounds, self.counts):
            cumulative += n
            lines.append(f'{self.name}_bucket{{le="{bound}",model_name="reference"}} {cumulative}')
        lines.append(f'{self.name}_bucket{{le="+Inf",model_name="reference"}} {self.count}')
        lines.append(f'{self.name}_sum{{model_name="reference"}} {self.sum!r}')
        lines.append(f'{self.name}_count{{model_name="reference"}} {self.count}')
        return lines


# the load gauges by prefix: running, waiting, KV use
GAUGE_NAMES = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage"),
}
# the prefixes whose server keeps gauges of the speculative acceptance, not counters
SPEC_AS_GAUGES = {"sglang"}


class ServedMetrics:
    """What the server served, in the names vLLM (or SGLang) uses."""

    def __init__(
        self, prefix: str, kv_capacity_tokens: int = 16384, spec_draft_tokens: int = 0, spec_acceptance: float = 0.0
    ):
        p = prefix
        self.ttft = PromHistogram(f"{p}:time_to_first_token_seconds", "Time to first token (server side)", TTFT_BUCKETS)
        self.itl = PromHistogram(f"{p}:inter_token_latency_seconds", "Gap between tokens written", ITL_BUCKETS)
        self.e2e = PromHistogram(f"{p}:e2e_request_latency_seconds", "Arrival to last token", E2E_BUCKETS)
        self.queue = PromHistogram(f"{p}:request_queue_time_seconds", "Time queued (always 0 here)", TTFT_BUCKETS)
        self.lateness = PromHistogram("reference:token_lateness_seconds", "Write time minus due time", LATENESS_BUCKETS)
        self.prefix = p
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests_ok = 0
        self.running = 0
        self.waiting = 0  # requests waiting for a slot (--max-running)
        self.kv_tokens = 0  # reply tokens reserved by the running requests
        self.kv_capacity_tokens = max(1, kv_capacity_tokens)
        self.spec_k, self.spec_p = spec_draft_tokens, spec_acceptance
        self.spec_drafts = self.spec_draft_tokens = self.spec_accepted = 0
        self.spec_per_pos = [0] * spec_draft_tokens

    def observe_spec_draft(self) -> None:
        """One verification of K draft tokens: the accepted total follows ⌊P · K · drafts⌋."""
        if not self.spec_k:
            return
        self.spec_drafts += 1
        self.spec_draft_tokens += self.spec_k
        accepted = int(self.spec_p * self.spec_k * self.spec_drafts + 1e-9) - self.spec_accepted
        self.spec_accepted += accepted
        for i in range(accepted):
            self.spec_per_pos[i] += 1

    def observe_chunk(self, t: float, due: float, prev_t: Optional[float], arrival: float, tokens: int) -> None:
        """A chunk of ``tokens`` written at ``t`` (due at ``due``): its lateness, and TTFT or ITL."""
        self.lateness.observe(t - due)
        self.observe_spec_draft()
        if prev_t is None:
            self.ttft.observe(t - arrival)
            if tokens > 1:
                self.itl.observe(0.0, tokens - 1)
        else:
            self.itl.observe((t - prev_t) / tokens, tokens)

    def served(self, arrival: float, last_t: Optional[float], n_prompt: int, n: int) -> None:
        """A reply sent whole."""
        self.queue.observe(0.0)
        if last_t is not None:
            self.e2e.observe(last_t - arrival)
        self.prompt_tokens += n_prompt
        self.generation_tokens += n
        self.requests_ok += 1

    def render(self) -> str:
        p = self.prefix
        lines: list[str] = []
        for h in (self.ttft, self.itl, self.e2e, self.queue, self.lateness):
            lines += h.render()
        for name, value in (
            (f"{p}:prompt_tokens", self.prompt_tokens),
            (f"{p}:generation_tokens", self.generation_tokens),
            (f"{p}:request_success", self.requests_ok),
        ):
            lines += [f"# TYPE {name} counter", f'{name}_total{{model_name="reference"}} {value}']
        running, waiting, kv = GAUGE_NAMES.get(p, GAUGE_NAMES["vllm"])
        kv_use = min(1.0, self.kv_tokens / self.kv_capacity_tokens)
        for name, level in ((running, self.running), (waiting, self.waiting), (kv, kv_use)):
            lines += [f"# TYPE {name} gauge", f'{name}{{model_name="reference"}} {level!r}']
        if self.spec_k and p in SPEC_AS_GAUGES:
            rate = self.spec_accepted / self.spec_draft_tokens if self.spec_draft_tokens else 0.0
            length = 1.0 + self.spec_accepted / self.spec_drafts if self.spec_drafts else 0.0
            for name, ratio in ((f"{p}:spec_accept_rate", rate), (f"{p}:spec_accept_length", length)):
                lines += [f"# TYPE {name} gauge", f'{name}{{model_name="reference"}} {ratio!r}']
        elif self.spec_k:
            for name, value in (
                (f"{p}:spec_decode_num_drafts", self.spec_drafts),
                (f"{p}:spec_decode_num_draft_tokens", self.spec_draft_tokens),
                (f"{p}:spec_decode_num_accepted_tokens", self.spec_accepted),
            ):
                lines += [f"# TYPE {name} counter", f'{name}_total{{model_name="reference"}} {value}']
            name = f"{p}:spec_decode_num_accepted_tokens_per_pos"
            lines.append(f"# TYPE {name} counter")
            lines += [
                f'{name}_total{{model_name="reference",position="{i}"}} {n}' for i, n in enumerate(self.spec_per_pos)
            ]
        return "\n".join(lines) + "\n"
