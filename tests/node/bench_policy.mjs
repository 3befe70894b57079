// Cost of an app approval policy (Agent.setApprovalPolicy), not run in CI: the same scripted run (one
// model answer with CALLS safe calls, then a text answer) on agents that differ only in the policy:
// the native default, a JS function answering 'allow', and the ArkTS-shaped JSON answer
// '{"action":"allow","reason":""}'. Runs alternate between the variants (so drift on a shared machine
// hits all alike) and the per-call difference of the medians is reported: the price of one policy
// round trip (queue to the JS thread, the run's task awaiting the answer, the answer parsed).
//
//   cargo build --release --features napi --lib
//   ARKAGENT_SO=target/release/libarkagent.so node tests/node/bench_policy.mjs
import { performance } from 'node:perf_hooks';
import { loadModule } from './helper.mjs';

const { Agent } = loadModule();
const CALLS = Number(process.env.BENCH_CALLS ?? 20);
const RUNS = Number(process.env.BENCH_RUNS ?? 300);
const WARMUP = 30;

const script = JSON.stringify([
  { tool_calls: Array.from({ length: CALLS }, (_, i) => ({ id: `c${i}`, name: 'echo', arguments: `{"i":${i}}` })) },
  { content: 'done' },
]);
const echo = async (args) => ({ contents: [{ type: 'text', text: args }] });

const variants = {
  default: null,
  js_allow: () => 'allow',
  json_allow: () => '{"action":"allow","reason":""}',
};

async function once(policy, i) {
  // A fresh agent per run: the scripted model replays from its start.
  const agent = new Agent({ provider: 'scripted', scriptJson: script, streaming: false });
  agent.registerTool({ name: 'echo', description: 'd', parametersJson: '{"type":"object"}' }, echo);
  if (policy !== null) agent.setApprovalPolicy(policy);
  const started = performance.now();
  const out = await agent.run(`s${i}`, 'go');
  const ms = performance.now() - started;
  if (out.status !== 'completed') throw new Error(`run ended ${out.status}`);
  return ms;
}

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
};

const samples = Object.fromEntries(Object.keys(variants).map((k) => [k, []]));
for (let i = 0; i < WARMUP + RUNS; i++) {
  for (const [name, policy] of Object.entries(variants)) {
    const ms = await once(policy, i);
    if (i >= WARMUP) samples[name].push(ms);
  }
}
const base = median(samples.default);
console.log(`calls per run: ${CALLS}, runs per variant: ${RUNS}`);
for (const [name, xs] of Object.entries(samples)) {
  const m = median(xs);
  const perCall = ((m - base) * 1000) / CALLS;
  console.log(`${name.padEnd(11)} median run ${m.toFixed(3)} ms, vs default ${(m / base).toFixed(3)}x, ` +
    `+${perCall.toFixed(1)} us per call`);
}
