// The Vercel AI SDK client of the end-to-end benchmark (scripts/bench.sh installs `ai`,
// `@ai-sdk/openai-compatible` and `zod` into a temporary directory and runs this file from there
// with NODE_PATH pointing at its node_modules).
//
//   node vercel_client.mjs BASE_URL ROUNDS
//
// streamText with one tool `record_reading` whose zod schema is the 6-property schema of
// benches/e2e/tool_schema.json (the SDK validates every call's input against it), stopWhen raised
// to ROUNDS + 5 steps. Prints one JSON line; exits 1 unless the run made exactly 3 * ROUNDS tool
// calls and ended with the final answer.
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';

// Resolve the packages from the temporary install (ESM ignores NODE_PATH).
const require = createRequire(join(process.env.PEERS_NODE_DIR ?? process.cwd(), 'package.json'));
const load = (name) => import(pathToFileURL(require.resolve(name)).href);
const { streamText, tool, stepCountIs } = await load('ai');
const { createOpenAICompatible } = await load('@ai-sdk/openai-compatible');
const { z } = await load('zod');

const [baseURL, roundsText] = process.argv.slice(2);
const rounds = Number(roundsText);
let executed = 0;

const provider = createOpenAICompatible({ name: 'mock', baseURL, apiKey: 'sk-bench-not-a-key', includeUsage: true });
const recordReading = tool({
  description: 'Records one station reading.',
  inputSchema: z
    .object({
      station: z.string().describe('station code'),
      day: z.string().describe('ISO date'),
      seq: z.number().int().describe('sequence number'),
      unit: z.enum(['celsius', 'fahrenheit']),
      verified: z.boolean(),
      note: z.string(),
    })
    .strict(),
  execute: async (input) => {
    executed += 1;
    return { recorded: true, seq: input.seq };
  },
});

const result = streamText({
  model: provider(`bench-r${rounds}`),
  tools: { record_reading: recordReading },
  stopWhen: stepCountIs(rounds + 5),
  maxRetries: 0,
  prompt: 'Record every reading the stations send.',
});
let errors = 0;
for await (const part of result.fullStream) {
  if (part.type === 'error' || part.type === 'tool-error') errors += 1;
}
const text = await result.text;
const ok = executed === 3 * rounds && errors === 0 && text.startsWith('All ');
console.log(JSON.stringify({ client: 'vercel-ai-sdk', rounds, tool_calls: executed, errors, final_text: text }));
process.exit(ok ? 0 : 1);
