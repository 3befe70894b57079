// The arkagent-through-Node client of the end-to-end benchmark: loads libarkagent.so with
// process.dlopen (as tests/node does) and runs the conversation with the native `Agent` class
// (contract: the end of arkts-bindings/src/main/cpp/types/libarkagent/index.d.ts).
//
//   ARKAGENT_SO=target/release/libarkagent.so node benches/e2e/napi_client.mjs BASE_URL ROUNDS
//
// One safe tool `record_reading` with the schema of benches/e2e/tool_schema.json (validated in
// Rust before the JS executor runs), maxRounds raised to ROUNDS + 5, state in memory. Prints one
// JSON line; exits 1 unless the run completed with exactly 3 * ROUNDS tool calls, and 3 when the
// loaded module has no `Agent` class (scripts/bench.sh then reports the client as not measured).
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const so = process.env.ARKAGENT_SO ?? join(here, '..', '..', 'target', 'release', 'libarkagent.so');
const module = { exports: {} };
try {
  process.dlopen(module, so);
} catch (e) {
  console.log(JSON.stringify({ client: 'arkagent-node', unavailable: `cannot load ${so}: ${e.message}` }));
  process.exit(3);
}
const { Agent } = module.exports;
if (typeof Agent !== 'function') {
  console.log(JSON.stringify({ client: 'arkagent-node', unavailable: `no Agent class in ${so}` }));
  process.exit(3);
}

const [baseUrl, roundsText] = process.argv.slice(2);
const rounds = Number(roundsText);
const schemaText = readFileSync(join(here, 'tool_schema.json'), 'utf8');
let executed = 0;

const agent = new Agent({
  provider: 'custom',
  baseUrl,
  model: `bench-r${rounds}`,
  apiKey: 'sk-bench-not-a-key',
  maxRounds: rounds + 5,
});
agent.registerTool(
  { name: 'record_reading', description: 'Records one station reading.', parametersJson: schemaText },
  async (argumentsJson) => {
    executed += 1;
    const args = JSON.parse(argumentsJson);
    return { contents: [{ type: 'json', json: JSON.stringify({ recorded: true, seq: args.seq }) }] };
  },
);
const outcome = await agent.run('bench', 'Record every reading the stations send.');
const ok = outcome.status === 'completed' && executed === 3 * rounds;
console.log(
  JSON.stringify({ client: 'arkagent-node', rounds, status: outcome.status, tool_calls: executed, final_text: outcome.finalText, error: outcome.errorCode }),
);
process.exit(ok ? 0 : 1);
