#!/usr/bin/env python3
"""Writes scripts/bench.sh's parts of BENCHMARKS.md (Python standard library only).

    bench_report.py --benchmarks BENCHMARKS.md --criterion-log DIR --e2e-md FILE \
        --command CMD --date DATE --machine TEXT

- The top summary (from `# Benchmarks` to the first `## ` heading) is rewritten: machine, date,
  command, and every criterion result of this run parsed from the logs in DIR (one `<bench>.log`
  per bench, `<bench>.status` holding its exit code).
- The `## End to end` section is replaced by the file --e2e-md (appended when missing).
- Every other section is kept byte for byte: other parts own them.
"""

import argparse
import glob
import os
import re

TIME_RE = re.compile(r"^(?P<name>\S.*?)?\s*time:\s+\[(?P<low>[^\]]+?)\s+(?P<mid>\S+ \S+)\s+(?P<high>\S+ \S+)\]")


def parse_criterion(text):
    """(benchmark id, low, median, high) for each `time:` line of a criterion log."""
    rows = []
    last_name = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        m = TIME_RE.match(line)
        if m:
            name = (m.group("name") or "").strip() or last_name
            low_parts = m.group("low").split()
            low = " ".join(low_parts[-2:])
            rows.append((name or "?", low, m.group("mid"), m.group("high")))
            last_name = None
            continue
        stripped = line.strip()
        if (
            not line.startswith(" ")
            and not stripped.startswith(("Benchmarking", "Found", "Gnuplot", "Warning", "change:", "Running", "Compiling", "Finished"))
            and ":" not in stripped.split(" ")[0][-1:]
        ):
            last_name = stripped
    return rows


def summary(args):
    lines = [
        "# Benchmarks",
        "",
        "Written by `scripts/bench.sh`: this summary and the \"End to end\" section. Each other section",
        "belongs to its part of the project and is written from that part's own run. Figures are",
        "criterion medians with the [low high] confidence bounds criterion prints; the machine has 2",
        "cores shared with other jobs, so absolute numbers are noisy and the ratios measured within",
        "one run are what the targets are about.",
        "",
        f"Last run of `scripts/bench.sh`: {args.date}. Machine: {args.machine}.",
        "",
        f"Command: `{args.command}`",
        "",
    ]
    logs = sorted(glob.glob(os.path.join(args.criterion_log, "*.log")))
    if logs:
        lines += [
            "### Criterion results of this run",
            "",
            "| bench | benchmark | median | [low high] |",
            "| --- | --- | --- | --- |",
        ]
        failed = []
        for log in logs:
            bench = os.path.basename(log)[:-4]
            status_file = log[:-4] + ".status"
            status = open(status_file).read().strip() if os.path.exists(status_file) else "?"
            if status != "0":
                failed.append(f"`{bench}` (exit {status})")
            for name, low, mid, high in parse_criterion(open(log, errors="replace").read()):
                lines.append(f"| `{bench}` | `{name}` | {mid} | [{low} {high}] |")
        lines.append("")
        if failed:
            lines += ["Benches that failed in this run: " + ", ".join(failed) + ".", ""]
    else:
        lines += ["(Criterion benches not run in this invocation.)", ""]
    return "\n".join(lines) + "\n"


def split_sections(text):
    """(head, [(heading line, body)]) split at `## ` headings."""
    parts = re.split(r"(?m)^(?=## )", text)
    head = parts[0]
    sections = []
    for p in parts[1:]:
        heading, _, body = p.partition("\n")
        sections.append((heading, body))
    return head, sections


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--benchmarks", required=True)
    ap.add_argument("--criterion-log", required=True)
    ap.add_argument("--e2e-md")
    ap.add_argument("--command", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--keep-summary", action="store_true", help="leave the top summary as it is")
    args = ap.parse_args()

    text = open(args.benchmarks).read() if os.path.exists(args.benchmarks) else "# Benchmarks\n"
    head, sections = split_sections(text)
    if not args.keep_summary:
        head = summary(args)
    if args.e2e_md and os.path.exists(args.e2e_md):
        e2e = open(args.e2e_md).read().rstrip("\n") + "\n\n"
        heading, _, body = e2e.partition("\n")
        replaced = False
        for i, (h, _) in enumerate(sections):
            if h.strip() == "## End to end":
                sections[i] = (heading, body)
                replaced = True
        if not replaced:
            if sections and not sections[-1][1].endswith("\n\n"):
                sections[-1] = (sections[-1][0], sections[-1][1].rstrip("\n") + "\n\n")
            sections.append((heading, body))
    out = head + "".join(h + "\n" + b for h, b in sections)
    with open(args.benchmarks, "w") as f:
        f.write(out.rstrip("\n") + "\n")


if __name__ == "__main__":
    main()
