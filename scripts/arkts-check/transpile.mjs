// Turns logic .ets files into ES modules for host tests, with ohos-typescript's transpileModule (what
// the project notes measured works for logic code; ArkUI structs cannot run on a host).
// Relative imports get the .mjs extension; `aliases` maps bare module names (a package such as
// '@arkagent/bindings', or 'libarkagent.so') to absolute .mjs files, so tests can substitute fakes.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(import.meta.url);

/** Transpiles one .ets file to outFile (.mjs). */
export function transpileFile(src, outFile, aliases = {}) {
  const ts = require('ohos-typescript');
  const out = ts.transpileModule(fs.readFileSync(src, 'utf8'), {
    compilerOptions: { target: ts.ScriptTarget.ES2021, module: ts.ModuleKind.ESNext },
    fileName: src,
  });
  // Relative imports name modules without an extension; ES modules in Node need one.
  let js = out.outputText.replace(/from '(\.{1,2}\/[^']+)'/g, "from '$1.mjs'");
  for (const [name, file] of Object.entries(aliases)) {
    js = js.split(`from '${name}'`).join(`from '${pathToFileURL(file).href}'`);
  }
  fs.mkdirSync(path.dirname(outFile), { recursive: true });
  fs.writeFileSync(outFile, js);
}

/** Transpiles every .ets file under srcDir into outDir (same layout, .mjs). */
export function transpileTree(srcDir, outDir, aliases = {}) {
  fs.mkdirSync(outDir, { recursive: true });
  for (const entry of fs.readdirSync(srcDir, { withFileTypes: true })) {
    const src = path.join(srcDir, entry.name);
    if (entry.isDirectory()) {
      transpileTree(src, path.join(outDir, entry.name), aliases);
    } else if (entry.name.endsWith('.ets')) {
      transpileFile(src, path.join(outDir, entry.name.replace(/\.ets$/, '.mjs')), aliases);
    }
  }
}

/** The logic modules of arkts-bindings/src/main/ets (every module but ArkUI code; there is none). */
export const BINDINGS_MODULES = ['json/Json', 'message/Message', 'tool/Tool', 'approval/Approval', 'approval/Policy',
  'hook/Hook', 'event/Events', 'agent/AgentConfig', 'agent/RunOutcome', 'agent/Adapters', 'agent/PolicyAdapter',
  'agent/Agent', 'agent/ToolRegistry', 'agent/SessionSummary', 'error/ArkAgentError'];

/**
 * Transpiles the bindings into outDir/bindings and writes outDir/bindings.mjs, a barrel exporting
 * every module (what `import ... from '@arkagent/bindings'` gives app code). Returns the barrel path.
 */
export function transpileBindings(etsDir, outDir, aliases = {}) {
  transpileTree(etsDir, path.join(outDir, 'bindings'), aliases);
  const barrel = path.join(outDir, 'bindings.mjs');
  fs.writeFileSync(barrel, BINDINGS_MODULES.map((m) => `export * from './bindings/${m}.mjs';\n`).join(''));
  return barrel;
}

/** Every export of these modules (paths relative to `dir`, without `.mjs`) of a transpiled tree, by name. */
export async function importModules(dir, modules) {
  const all = {};
  for (const rel of modules) {
    Object.assign(all, await import(pathToFileURL(path.join(dir, `${rel}.mjs`)).href));
  }
  return all;
}
