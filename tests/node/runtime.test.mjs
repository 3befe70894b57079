// The module owns one tokio runtime with two worker threads (named arkagent-rt), whatever the
// number of registries and calls.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { loadModule, objectSchema, text } from './helper.mjs';

const { ToolRegistry } = loadModule();

function runtimeThreads() {
  return readdirSync('/proc/self/task')
    .map((t) => readFileSync(`/proc/self/task/${t}/comm`, 'utf8').trim())
    .filter((name) => name.startsWith('arkagent-rt'));
}

test('calls run on the module runtime: two worker threads, shared by every registry', async () => {
  const registries = [new ToolRegistry(), new ToolRegistry(), new ToolRegistry()];
  const calls = [];
  registries.forEach((r, k) => {
    r.register({ name: 't', description: 'd', parametersJson: objectSchema }, async (args) => text(`${k}${args}`));
    for (let i = 0; i < 20; i++) calls.push(r.execute({ id: `${k}-${i}`, name: 't', arguments: '{}' }));
  });
  const results = await Promise.all(calls);
  assert.equal(results.length, 60);
  assert.equal(results[59].contents[0].text, '2{}');
  assert.deepEqual(runtimeThreads(), ['arkagent-rt', 'arkagent-rt']);
});
