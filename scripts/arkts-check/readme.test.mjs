// The ArkTS examples of the docs type-check and pass the ArkTS linter as written: every ```ts block
// of README.md, arkts-bindings/README.md and entry-demo/README.md becomes an .ets file of a small app
// that depends on the bindings HAR, checked against the real index.d.ts. Each block is taken as a
// reader would paste it: names it uses from the bindings without importing them are imported for
// it (the docs leave some imports out), and the few things the examples assume the app has (an
// `agent`, its `apiKey`, the ability `context`, a `definition`, the ReadBakingRecords executor,
// `appendToBubble`) come from a prelude. A deliberately wrong block proves the harness can fail.
// Run: node --test scripts/arkts-check/readme.test.mjs

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { tempDir } from './tmp.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const DOCS = ['README.md', 'arkts-bindings/README.md', 'entry-demo/README.md'];

const PRELUDE = `// What the examples assume the app already has.
import { Agent, AgentConfig, JsonObject, ToolContext, ToolDefinition, ToolExecutor, ToolResult } from '@arkagent/bindings';

export const apiKey: string = 'sk-example';

export class AbilityContextLike {
  filesDir: string = '/data/storage/el2/base/haps/entry/files';
}

export const context: AbilityContextLike = new AbilityContextLike();
export const agent: Agent = new Agent(AgentConfig.scripted('[]'));
export const definition: ToolDefinition = new ToolDefinition('t', 'd', new JsonObject().setString('type', 'object'));

export function appendToBubble(text: string): void {
}

export class ReadBakingRecords implements ToolExecutor {
  async execute(args: JsonObject, ctx: ToolContext): Promise<ToolResult> {
    return ToolResult.text('');
  }
}
`;
const PRELUDE_NAMES = ['apiKey', 'context', 'agent', 'definition', 'appendToBubble', 'ReadBakingRecords'];

/** Every ```ts block of the docs: [doc, index, text]. */
function blocks() {
  const out = [];
  for (const doc of DOCS) {
    const text = fs.readFileSync(path.join(ROOT, doc), 'utf8');
    let i = 0;
    for (const m of text.matchAll(/^```ts\n([\s\S]*?)^```/gm)) out.push([doc, ++i, m[1]]);
  }
  return out;
}

/** The names the bindings' Index.ets exports. */
function bindingExports() {
  const index = fs.readFileSync(path.join(ROOT, 'arkts-bindings', 'Index.ets'), 'utf8');
  return [...index.matchAll(/export \{([^}]*)\}/g)].flatMap((m) => m[1].split(',').map((s) => s.trim()).filter(Boolean));
}

/** The block as an .ets module: the imports it leaves out, then the block as written. */
function asModule(block, exported) {
  const imported = new Set([...block.matchAll(/import \{([^}]*)\}/g)].flatMap((m) => m[1].split(',').map((s) => s.trim())));
  const declared = new Set([...block.matchAll(/\b(?:const|let|class|function)\s+(\w+)/g)].map((m) => m[1]));
  const used = new Set(block.match(/\b[A-Za-z_]\w*\b/g));
  const missing = (name) => used.has(name) && !imported.has(name) && !declared.has(name);
  const head = [];
  const fromBindings = exported.filter(missing);
  if (fromBindings.length > 0) head.push(`import { ${fromBindings.join(', ')} } from '@arkagent/bindings';`);
  const fromPrelude = PRELUDE_NAMES.filter(missing);
  if (fromPrelude.length > 0) head.push(`import { ${fromPrelude.join(', ')} } from './Prelude';`);
  // The block's own imports stay first (ArkTS wants every import before other statements).
  const lines = block.split('\n');
  let end = 0;
  let inImport = false;
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].startsWith('import ')) inImport = true;
    if (inImport) {
      end = i + 1;
      if (lines[i].trimEnd().endsWith(';')) inImport = false;
    } else if (lines[i].trim().length > 0) {
      break;
    }
  }
  return [...lines.slice(0, end), ...head, ...lines.slice(end)].join('\n');
}

/** Writes the app (Prelude.ets and one file per block) and checks it; returns the report. */
function checkApp(files) {
  const dir = tempDir('arkagent-doc-examples-');
  fs.writeFileSync(path.join(dir, 'oh-package.json5'),
    `{ "name": "doc-examples", "dependencies": { "@arkagent/bindings": ${JSON.stringify(`file:${path.join(ROOT, 'arkts-bindings')}`)} } }\n`);
  fs.mkdirSync(path.join(dir, 'src'));
  fs.writeFileSync(path.join(dir, 'src', 'Prelude.ets'), PRELUDE);
  for (const [name, text] of files) fs.writeFileSync(path.join(dir, 'src', name), text);
  const result = spawnSync(process.execPath, [path.join(HERE, 'check.mjs'), '--json', dir], { cwd: dir, encoding: 'utf8' });
  assert.ok(result.stdout.length > 0, `no output; stderr: ${result.stderr}`);
  return { status: result.status, report: JSON.parse(result.stdout) };
}

test('every ArkTS example of the docs passes the ArkTS check against the real declarations', () => {
  const exported = bindingExports();
  const all = blocks();
  assert.ok(all.length >= 7, `ts blocks found: ${all.length}`);
  const files = all.map(([doc, i, text]) => [`${doc.replace(/[^A-Za-z0-9]/g, '_')}_${i}.ets`, asModule(text, exported)]);
  const { status, report } = checkApp(files);
  const where = (d) => {
    const file = files.find(([name]) => d.file.endsWith(name));
    const line = file === undefined ? '' : file[1].split('\n')[d.line - 1];
    return `${d.file}:${d.line} ${d.code} ${d.message}\n    ${line}`;
  };
  assert.deepEqual(report.diagnostics.map(where), []);
  assert.equal(report.files, files.length + 1);
  assert.equal(status, 0);
});

test('an example that imports from the bindings imports every name of the bindings it uses', () => {
  // A block without an import is a fragment (the harness supplies its names); one with an import
  // is pasted as a module, and a name it leaves out would not compile where it is pasted.
  const exported = bindingExports();
  const incomplete = [];
  for (const [doc, i, text] of blocks()) {
    if (!/from '@arkagent\/bindings'/.test(text)) continue;
    const imported = new Set([...text.matchAll(/import \{([^}]*)\}/g)].flatMap((m) => m[1].split(',').map((s) => s.trim())));
    const declared = new Set([...text.matchAll(/\b(?:const|let|class|function)\s+(\w+)/g)].map((m) => m[1]));
    const used = new Set(text.match(/\b[A-Za-z_]\w*\b/g));
    const missing = exported.filter((n) => used.has(n) && !imported.has(n) && !declared.has(n));
    if (missing.length > 0) incomplete.push(`${doc} block ${i}: ${missing.join(', ')}`);
  }
  assert.deepEqual(incomplete, []);
});

test('the harness reports a wrong example', () => {
  const wrong = "const agentCount: number = 'two';\nagent.registerTool(definition, 'not an executor');\n";
  const { status, report } = checkApp([['Wrong.ets', asModule(wrong, bindingExports())]]);
  assert.deepEqual(report.diagnostics.map((d) => [d.line, d.code]), [[2, 'TS2322'], [3, 'TS2345']]);
  assert.equal(status, 1);
});
