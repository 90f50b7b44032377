"""Convert AIPerf/kv-cache-tester Weka agentic traces to the harness's agent-trace JSONL.

    python scripts/convert_weka_trace.py TRACE.json [MORE.json | DIR ...] -o agent_trace.jsonl

Each input file is one Weka trace (one job); a directory converts every *.json in it, sorted.
Then: ``python -m harness workload=agentic workload.trace_path=agent_trace.jsonl``.
The mapping is in workloads/weka_trace.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.errors import ConfigError
from workloads.weka_trace import Converted, weka_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", type=Path)
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    files: list[Path] = []
    for p in args.inputs:
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    out = Converted()
    try:
        for f in files:
            weka_lines(json.loads(f.read_text(encoding="utf-8")), out=out)
    except (ConfigError, json.JSONDecodeError, OSError) as exc:
        print(f"convert_weka_trace: {exc}", file=sys.stderr)
        return 2
    args.output.write_text("".join(json.dumps(line) + "\n" for line in out.lines), encoding="utf-8")
    print(
        f"{len(files)} traces → {len(out.lines)} calls in {args.output}"
        + (f" ({out.skipped} sub-agent markers skipped)" if out.skipped else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
