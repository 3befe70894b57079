// The .d.ts of the module declares exactly what the loaded .so exports, and each declared class
// exactly the members its prototype has.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, readDts } from './helper.mjs';

const native = loadModule();
// Arguments for classes whose constructor needs some (the others are built with none).
const constructorArgs = { Agent: [{ provider: 'scripted', scriptJson: '[]' }] };
const dts = readDts().replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/.*$/gm, '');

function declaredExports() {
  const names = new Set();
  for (const m of dts.matchAll(/export\s+declare\s+(?:function|class|const|let|enum)\s+([A-Za-z_$][\w$]*)/g)) {
    names.add(m[1]);
  }
  return names;
}

function declaredMembers(className) {
  const start = dts.search(new RegExp(`export\\s+declare\\s+class\\s+${className}\\b`));
  assert.ok(start >= 0, `class ${className} not declared`);
  const open = dts.indexOf('{', start);
  let depth = 0;
  let end = open;
  for (; end < dts.length; end++) {
    if (dts[end] === '{') depth++;
    if (dts[end] === '}' && --depth === 0) break;
  }
  const body = dts.slice(open + 1, end);
  const members = new Set();
  // A member starts a line: `name(`, `get name(`, `set name(`; constructor excluded.
  for (const m of body.matchAll(/^\s*(?:get\s+|set\s+)?([A-Za-z_$][\w$]*)\s*\(/gm)) {
    if (m[1] !== 'constructor') members.add(m[1]);
  }
  return members;
}

test('every declared export is exported, and every export is declared', () => {
  const declared = declaredExports();
  const actual = new Set(Object.keys(native));
  assert.ok(declared.size >= 4, `parsed too few declarations: ${[...declared]}`);
  assert.deepEqual([...declared].filter((n) => !actual.has(n)), [], 'declared but not exported');
  assert.deepEqual([...actual].filter((n) => !declared.has(n)), [], 'exported but not declared');
});

test('declared kinds match: functions are functions, classes construct', () => {
  for (const m of dts.matchAll(/export\s+declare\s+function\s+([A-Za-z_$][\w$]*)/g)) {
    assert.equal(typeof native[m[1]], 'function', m[1]);
  }
  for (const m of dts.matchAll(/export\s+declare\s+class\s+([A-Za-z_$][\w$]*)/g)) {
    assert.equal(typeof native[m[1]], 'function', m[1]);
    const args = constructorArgs[m[1]] ?? [];
    assert.ok(new native[m[1]](...args) instanceof native[m[1]], `new ${m[1]}()`);
  }
});

test('each declared class has exactly the declared members', () => {
  for (const m of dts.matchAll(/export\s+declare\s+class\s+([A-Za-z_$][\w$]*)/g)) {
    const name = m[1];
    const declared = declaredMembers(name);
    const actual = new Set(Object.getOwnPropertyNames(native[name].prototype).filter((n) => n !== 'constructor'));
    assert.deepEqual([...declared].filter((n) => !actual.has(n)).sort(), [], `${name}: declared but missing`);
    assert.deepEqual([...actual].filter((n) => !declared.has(n)).sort(), [], `${name}: present but not declared`);
  }
});
