// Round-trip benchmark of the binding (not run in CI), two measurements:
//
// 1. rust_timed (the round trip): Rust -> thread-safe call into a JS executor -> its
//    Promise -> Rust, timed in Rust around the gates and the executor, as the runtime makes each
//    call of a model's answer. It needs the bench-only export ToolRegistry.benchRoundTrip, which a
//    module built with the `napi-bench` feature has (never shipped); without it this part is
//    skipped and said so.
// 2. execute_from_js (an upper bound): ToolRegistry.execute from JS, timed in JS: the same round
//    trip plus the two hops of execute itself (JS -> Rust at the start, Rust -> JS for the result).
//
//   cargo build --release --features napi-bench --lib
//   ARKAGENT_SO=target/release/libarkagent.so node tests/node/bench_roundtrip.mjs
//
// Without ARKAGENT_SO it builds and loads the debug .so (slower, without the Rust-timed part; only
// for a quick look).
//
// BENCH_TEXT_BYTES=n makes the executor answer a text of about n bytes instead of its arguments
// (BENCH_TEXT=multibyte: "é中😀" repeated, else ASCII), and execute() send it as the call's
// arguments too: the cost of reading big strings (BENCHMARKS.md, "NAPI strings (session 10)").
import { performance } from 'node:perf_hooks';
import { loadModule } from './helper.mjs';

const { ToolRegistry } = loadModule();
const N = Number(process.env.BENCH_CALLS ?? 20000);
const WARMUP = Math.min(2000, N);

const registry = new ToolRegistry();
const TEXT_BYTES = Number(process.env.BENCH_TEXT_BYTES ?? 0);
const UNIT = process.env.BENCH_TEXT === 'multibyte' ? 'é中😀' : 'x';
// 'é中😀' is 9 bytes of UTF-8.
const BIG = TEXT_BYTES > 0 ? UNIT.repeat(Math.max(1, Math.round(TEXT_BYTES / (UNIT === 'x' ? 1 : 9)))) : '';
registry.register(
  { name: 'echo', description: 'returns its argument', parametersJson: JSON.stringify({ type: 'object' }) },
  BIG ? async () => ({ contents: [{ type: 'text', text: BIG }] }) : async (args) => ({ contents: [{ type: 'text', text: args }] }),
);
const BIG_ARGS = BIG ? JSON.stringify({ s: BIG }) : '';
const call = (i) => registry.execute({ id: `c${i}`, name: 'echo', arguments: BIG ? BIG_ARGS : `{"i":${i}}` });

function stats(samples) {
  const s = Float64Array.from(samples).sort();
  const at = (q) => s[Math.min(s.length - 1, Math.floor(q * s.length))];
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  return {
    n: s.length,
    median_us: +(at(0.5) * 1000).toFixed(1),
    p99_us: +(at(0.99) * 1000).toFixed(1),
    mean_us: +(mean * 1000).toFixed(1),
  };
}

async function sequential(n) {
  const samples = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await call(i);
    samples.push(performance.now() - t0);
  }
  return samples;
}

async function inFlight(n, width) {
  const samples = [];
  let next = 0;
  const t0 = performance.now();
  async function lane() {
    while (next < n) {
      const i = next++;
      const t = performance.now();
      await call(i);
      samples.push(performance.now() - t);
    }
  }
  await Promise.all(Array.from({ length: width }, lane));
  const wall = performance.now() - t0;
  return { samples, callsPerSecond: Math.round(n / (wall / 1000)), amortizedUs: +((wall * 1000) / n).toFixed(1) };
}

/** The Rust-timed round trip, when the module has the bench-only export. */
async function rustTimed() {
  if (typeof registry.benchRoundTrip !== 'function') {
    return 'not measured: build the module with --features napi-bench';
  }
  const one = { id: 'r1', name: 'echo', arguments: '{"i":1}' };
  await registry.benchRoundTrip(one, WARMUP, 1);
  const sequentialTimes = await registry.benchRoundTrip(one, N, 1);
  await registry.benchRoundTrip(one, WARMUP, 100);
  const t0 = performance.now();
  const parallelTimes = await registry.benchRoundTrip(one, N, 100);
  const wall = performance.now() - t0;
  const ms = (times) => times.map((us) => us / 1000);
  return {
    one_at_a_time: stats(ms(sequentialTimes)),
    in_flight_100: { ...stats(ms(parallelTimes)), calls_per_second: Math.round(N / (wall / 1000)) },
  };
}

const rust = await rustTimed();
await sequential(WARMUP);
const seq = stats(await sequential(N));
await inFlight(WARMUP, 100);
const par = await inFlight(N, 100);
console.log(JSON.stringify({
  so: process.env.ARKAGENT_SO,
  text: BIG ? { bytes: Buffer.byteLength(BIG), kind: UNIT === 'x' ? 'ascii' : 'multibyte' } : 'none',
  rust_timed: rust,
  execute_from_js: {
    one_at_a_time: seq,
    // Latency of each call while 100 are outstanding (mostly queueing: 100 / throughput), and the
    // wall time per call (1 / throughput).
    in_flight_100: { ...stats(par.samples), calls_per_second: par.callsPerSecond, amortized_us_per_call: par.amortizedUs },
  },
}, null, 2));
