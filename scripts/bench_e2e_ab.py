#!/usr/bin/env python3
"""Interleaved A/B of two builds of the Rust end-to-end client (examples/bench_client.rs).

    python3 scripts/bench_e2e_ab.py --mock target/release/examples/mock_openai \
        --a OLD/bench_client --b target/release/examples/bench_client [--runs 15] [--rounds 0,20,200]

Starts the mock server once (127.0.0.1), then for each repetition runs A and B (alternating which
goes first) at every R, measuring each client process's CPU (user + sys) with wait4. On a shared
machine both builds then see the same load. Prints per-R medians, the per-round figures bench.sh
derives ((CPU(R) - CPU(0)) / R and the marginal (CPU(200) - CPU(20)) / 180, both from medians),
and the load average before and after. Python standard library only.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def cpu_of(argv):
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    err = proc.stderr.read()
    proc.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"client failed ({code}): {' '.join(argv)}\n{err.decode(errors='replace')}")
    return usage.ru_utime + usage.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mock", required=True)
    ap.add_argument("--a", required=True, help="the old build of bench_client")
    ap.add_argument("--b", required=True, help="the new build of bench_client")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--rounds", default="0,20,200")
    args = ap.parse_args()
    rounds = [int(r) for r in args.rounds.split(",")]
    port_file = os.path.join(tempfile.mkdtemp(), "port")
    mock = subprocess.Popen([args.mock, "--port-file", port_file], stdout=subprocess.DEVNULL)
    try:
        for _ in range(200):
            if os.path.exists(port_file) and open(port_file).read().strip():
                break
            time.sleep(0.05)
        base = f"http://127.0.0.1:{open(port_file).read().strip()}/v1"
        print(f"load average before: {os.getloadavg()}", flush=True)
        cpu = {(k, r): [] for k in "ab" for r in rounds}
        for rep in range(args.runs):
            for r in rounds:
                order = "ab" if rep % 2 == 0 else "ba"
                for k in order:
                    exe = args.a if k == "a" else args.b
                    cpu[(k, r)].append(cpu_of([exe, "--base-url", base, "--rounds", str(r)]))
        print(f"load average after: {os.getloadavg()}")
        med = {key: statistics.median(v) for key, v in cpu.items()}
        print(f"runs per build and R: {args.runs}")
        for r in rounds:
            a, b = med[("a", r)] * 1000, med[("b", r)] * 1000
            print(f"R={r:<5} CPU median  A {a:8.2f} ms   B {b:8.2f} ms   B/A {b / a:.3f}")
        if 0 in rounds:
            for r in rounds:
                if r > 0:
                    pa = (med[("a", r)] - med[("a", 0)]) / r * 1e6
                    pb = (med[("b", r)] - med[("b", 0)]) / r * 1e6
                    print(f"per round at R={r:<5} A {pa:7.1f} us   B {pb:7.1f} us")
        if 20 in rounds and 200 in rounds:
            ma = (med[("a", 200)] - med[("a", 20)]) / 180 * 1e6
            mb = (med[("b", 200)] - med[("b", 20)]) / 180 * 1e6
            print(f"marginal (200-20)/180     A {ma:7.1f} us   B {mb:7.1f} us")
    finally:
        mock.kill()
        mock.wait()


if __name__ == "__main__":
    main()
