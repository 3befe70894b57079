// Harder cases: re-entrant calls, registry changes during calls, big and non-ASCII payloads, and
// many concurrent calls that fail in every way at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadModule, objectSchema, rejectsWithCode, text, throwsWithCode } from './helper.mjs';

const { ToolRegistry } = loadModule();

test('an executor may call execute itself (re-entrant, no deadlock)', async () => {
  const r = new ToolRegistry();
  r.register({ name: 'leaf', description: 'd', parametersJson: objectSchema }, (args) => text(`leaf ${args}`));
  r.register({ name: 'outer', description: 'd', parametersJson: objectSchema }, async () => {
    const inner = await r.execute({ id: 'inner', name: 'leaf', arguments: '{"x":1}' });
    return text(`outer(${inner.contents[0].text})`);
  });
  const res = await r.execute({ id: 'o', name: 'outer', arguments: '{}' });
  assert.equal(res.contents[0].text, 'outer(leaf {"x":1})');
});

test('unregistering during a call lets that call finish; later calls do not find the tool', async () => {
  const r = new ToolRegistry();
  let release;
  r.register({ name: 'slow', description: 'd', parametersJson: objectSchema }, () => new Promise((resolve) => (release = resolve)));
  const pending = r.execute({ id: 'c1', name: 'slow', arguments: '{}' });
  while (!release) await sleep(1);
  assert.equal(r.unregister('slow'), true);
  release(text('finished anyway'));
  assert.equal((await pending).contents[0].text, 'finished anyway');
  await rejectsWithCode(assert, r.execute({ id: 'c2', name: 'slow', arguments: '{}' }), 'tool_not_found');
});

test('non-ASCII text and a 200 KB payload cross intact both ways', async () => {
  const r = new ToolRegistry();
  r.register({ name: 'echo', description: 'd', parametersJson: objectSchema }, (args) => {
    const { s } = JSON.parse(args);
    return { contents: [{ type: 'text', text: s }, { type: 'json', json: JSON.stringify({ s }) }] };
  });
  const s = '订单 🍰 ß\u0000é\u2028'.repeat(10) + 'x'.repeat(200_000);
  const res = await r.execute({ id: 'c', name: 'echo', arguments: JSON.stringify({ s }) });
  assert.equal(res.contents[0].text, s);
  assert.equal(JSON.parse(res.contents[1].json).s, s);
});

test('400 concurrent calls failing in every way each get their own code (tool_not_started when never entered)', async () => {
  const r = new ToolRegistry();
  const modes = {
    ok: async (i) => text(`ok ${i}`),
    throw: () => {
      throw new Error('t');
    },
    reject: async () => {
      throw new Error('r');
    },
    undef: async () => undefined,
    shape: () => ({ contents: 1 }),
    hang: () => new Promise(() => {}),
  };
  const expected = { ok: null, throw: 'tool_execution_failed', reject: 'tool_execution_failed', undef: 'tool_result_invalid', shape: 'tool_result_invalid', hang: 'tool_timeout' };
  // A call whose executor the JS thread could not enter within its 200 ms (a loaded machine: 400
  // calls queue on one thread) is answered tool_not_started, never run late: the executors record
  // their entry, and such a call must have that code instead of its mode's.
  const entered = new Set();
  for (const [name, f] of Object.entries(modes)) {
    r.register({ name, description: 'd', parametersJson: objectSchema, timeoutMs: 200 }, (args) => {
      const { i } = JSON.parse(args);
      entered.add(i);
      return f(i);
    });
  }
  r.register({ name: 'ok_too', description: 'd', parametersJson: objectSchema }, (args) => text(`ok ${JSON.parse(args).i}`));
  const names = Object.keys(modes);
  const outcomes = await Promise.all(
    Array.from({ length: 400 }, (_, i) => {
      const name = names[i % names.length];
      return r.execute({ id: `c${i}`, name, arguments: JSON.stringify({ i }) }).then(
        (res) => ({ i, name, code: null, text: res.contents[0].text }),
        (e) => ({ i, name, code: e.code }),
      );
    }),
  );
  await new Promise((resolve) => setTimeout(resolve, 300)); // a call made late would show here
  for (const o of outcomes) {
    const code = entered.has(o.i) ? expected[o.name] : 'tool_not_started';
    assert.equal(o.code, code, `call ${o.i} (${o.name}, ${entered.has(o.i) ? 'entered' : 'never entered'})`);
    if (o.name === 'ok') assert.equal(o.text, `ok ${o.i}`);
  }
  // And the registry still works normally afterwards.
  assert.equal((await r.execute({ id: 'z', name: 'ok_too', arguments: '{"i":7}' })).contents[0].text, 'ok 7');
});

test('a sparse array of length 2**32-1 is refused with a coded error, not reserved (the allocation aborted the process)', async () => {
  const sparse = [];
  sparse.length = 2 ** 32 - 1;
  const r = new ToolRegistry();
  const e = throwsWithCode(assert, () => r.copyIntoExcluding(new ToolRegistry(), sparse), 'argument_invalid', 'config');
  assert.equal(e.message, 'wrong argument: excludedNames[0]: undefined, a hole in the array');
  r.register({ name: 'sparse', description: 'd', parametersJson: objectSchema }, () => ({ contents: sparse }));
  const rejected = await rejectsWithCode(assert, r.execute({ id: 'c', name: 'sparse', arguments: '{}' }), 'tool_result_invalid', 'tool');
  assert.match(rejected.message, /not a ToolResult: contents\[0\]: undefined, a hole in the array$/);
  // A dense array still crosses whole, and a hole further on is refused.
  r.register({ name: 'dense', description: 'd', parametersJson: objectSchema }, () => ({ contents: Array.from({ length: 3 }, (_, i) => ({ type: 'text', text: `p${i}` })) }));
  assert.deepEqual((await r.execute({ id: 'd', name: 'dense', arguments: '{}' })).contents.map((p) => p.text), ['p0', 'p1', 'p2']);
  const holey = ['a', 'b'];
  holey[5] = 'c';
  assert.match(throwsWithCode(assert, () => r.copyIntoExcluding(new ToolRegistry(), holey), 'argument_invalid').message, /excludedNames\[2\]: undefined, a hole/);
});

test('JSON text cut after a backslash, with a \\u escape before it, is refused as not JSON, not a caught panic', async () => {
  // The scan for lone-surrogate escapes stepped past the end of such a text (internal_panic).
  const cut = '{"type":"object","description":"\\u0041 \\';
  const r = new ToolRegistry();
  const e = throwsWithCode(assert, () => r.register({ name: 't', description: 'd', parametersJson: cut }, () => text('x')), 'schema_invalid_root', 'config');
  assert.match(e.message, /is not JSON/);
  r.register({ name: 'ok', description: 'd', parametersJson: objectSchema }, () => text('x'));
  await rejectsWithCode(assert, r.execute({ id: 'c1', name: 'ok', arguments: '{"a":"\\u0041\\' }), 'json_invalid');
});
