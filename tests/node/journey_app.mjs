// A small app written against the raw native module with only index.d.ts in hand (what a JS or
// ArkTS developer who skips the wrapper classes writes): two tools, one safe and one dangerous, a
// hook that rewrites arguments, a listener that renders every event, and the conversation read back
// from the state. journey.test.mjs runs it, kills it while it waits for an approval, and opens it
// again; the killed process imports this same file (`node journey_app.mjs <stateDir>`).
import { loadModule } from './helper.mjs';

const { Agent, CancellationHandle } = loadModule();

/** The event types index.d.ts documents for AgentEventListener. */
export const DOCUMENTED_EVENT_TYPES = ['run_started', 'text_delta', 'reasoning_delta', 'tool_call_started',
  'tool_call_arguments_delta', 'tool_call_finished', 'approval_required', 'tool_result', 'state_persisted',
  'run_finished', 'worker_event'];

/** The model's answers of the first run: a lookup, then a batch with a dangerous delete. */
export const RUN_SCRIPT = [
  { tool_calls: [{ id: 'c1', name: 'lookup_recipe', arguments: '{"name":"  Baguette "}' }] },
  {
    content: 'Deleting the bagel.',
    tool_calls: [{ id: 'c2', name: 'delete_recipe', arguments: '{"name":" BAGEL ","reason":"duplicate"}' }],
  },
];

const lookupSchema = JSON.stringify({
  type: 'object',
  properties: { name: { type: 'string', minLength: 1 }, servings: { type: 'integer', minimum: 1, maximum: 12 } },
  required: ['name'],
  additionalProperties: false,
});
const deleteSchema = JSON.stringify({
  type: 'object',
  properties: { name: { type: 'string' }, reason: { enum: ['duplicate', 'obsolete'] } },
  required: ['name', 'reason'],
});

/** One line for any event. */
export function renderEvent(json) {
  const e = JSON.parse(json);
  switch (e.type) {
    case 'run_started': return `run started${e.resumed ? ' (resumed)' : ''} ${e.session_id}`;
    case 'text_delta': return `text ${e.delta}`;
    case 'reasoning_delta': return `thinking ${e.delta}`;
    case 'tool_call_started': return `call ${e.index} ${e.name} ${e.id}`;
    case 'tool_call_arguments_delta': return `args ${e.index} ${e.delta}`;
    case 'tool_call_finished': return `called ${e.call.name} ${e.call.arguments}`;
    case 'approval_required': return `approve? ${e.batch.items.map((i) => `${i.tool_call.name} ${i.approval_id}`).join(', ')}`;
    case 'tool_result': return `result ${e.name} ${e.result.is_error ? 'error' : 'ok'} ${e.result.contents.map((c) => c.text ?? JSON.stringify(c.value)).join('')}`;
    case 'state_persisted': return `saved ${e.events}`;
    case 'run_finished': return `finished ${e.status}${e.error ? ` ${e.error.layer}/${e.error.code}` : ''}`;
    case 'worker_event': return `worker ${renderEvent(JSON.stringify(e.event))}`;
    default: return `unknown ${e.type}`;
  }
}

/** The app: an agent over `stateDir` replaying `script`; `lines` gets every event, `done` the tools' work. */
export function openApp(stateDir, script, lines = [], done = []) {
  const agent = new Agent({ provider: 'scripted', scriptJson: JSON.stringify(script), stateDir, systemPrompt: 'Recipes.' });
  agent.registerTool({ name: 'lookup_recipe', description: 'Looks up a recipe', parametersJson: lookupSchema, idempotent: true },
    (argsJson) => {
      const args = JSON.parse(argsJson);
      done.push(`lookup ${argsJson}`);
      return { contents: [{ type: 'json', json: JSON.stringify({ name: args.name, servings: args.servings }) }] };
    });
  agent.registerTool({ name: 'delete_recipe', description: 'Deletes a recipe', parametersJson: deleteSchema, riskLevel: 'dangerous' },
    async (argsJson, context) => {
      done.push(`delete ${argsJson} in ${context.sessionId}`);
      return { contents: [{ type: 'text', text: `deleted ${JSON.parse(argsJson).name}` }] };
    });
  // Safe and slow: answers only when its call is cancelled; says on stdout when it starts.
  agent.registerTool({ name: 'slow_search', description: 'Searches every recipe site', parametersJson: '{"type":"object"}' },
    (_args, context) => new Promise((resolve) => {
      done.push('search started');
      if (process.env.JOURNEY_CHILD === '1') process.stdout.write('SEARCHING\n');
      context.signal.onCancel(() => resolve({ contents: [{ type: 'text', text: 'stopped' }] }));
    }));
  // Names trimmed and lower case; a lookup without servings asks for 2.
  agent.addHook({
    beforeToolCall(_contextJson, callJson) {
      const call = JSON.parse(callJson);
      const args = JSON.parse(call.arguments);
      if (typeof args.name === 'string') args.name = args.name.trim().toLowerCase();
      if (call.name === 'lookup_recipe' && args.servings === undefined) args.servings = 2;
      return { action: 'proceed', argumentsJson: JSON.stringify(args) };
    },
  });
  agent.onEvent((json) => lines.push(renderEvent(json)));
  return agent;
}

/** The conversation from the state, one line per message (system left out). */
export async function conversation(agent, sessionId) {
  const json = await agent.stateJson(sessionId);
  if (json === null) return [];
  return JSON.parse(json).messages.filter((m) => m.role !== 'system').map((m) => {
    if (m.role === 'tool') return `${m.name} ${m.is_error ? 'error' : 'ok'}: ${m.content}`;
    if (m.role === 'assistant') {
      const calls = (m.tool_calls ?? []).map((c) => `${c.name}${c.arguments}`).join(' ');
      return `assistant: ${m.content ?? ''}${calls ? ` [${calls}]` : ''}`;
    }
    return `${m.role}: ${m.content}`;
  });
}

export { CancellationHandle };

/** The model's answer of a run whose tool is still searching when the app is killed. */
export const SEARCH_SCRIPT = [{ tool_calls: [{ id: 's1', name: 'slow_search', arguments: '{}' }] }];

// As a process (`node journey_app.mjs <stateDir> approval|search`, JOURNEY_CHILD=1): run until the
// approval is asked and say so, or until the slow search runs; then wait to be killed.
if (process.argv[2] !== undefined && import.meta.url === `file://${process.argv[1]}`) {
  const lines = [];
  setInterval(() => {}, 1000);
  if (process.argv[3] === 'search') {
    openApp(process.argv[2], SEARCH_SCRIPT, lines).run('pantry', 'Search rye recipes everywhere');
  } else {
    const agent = openApp(process.argv[2], RUN_SCRIPT, lines);
    const outcome = await agent.run('kitchen', 'Delete the bagel and show me the baguette');
    process.stdout.write(`${JSON.stringify({ status: outcome.status, lines })}\n`);
  }
}
