// The ArkTS bindings transpiled against the REAL native module: the cdylib built with the `napi`
// feature (scripts/test.sh sets ARKAGENT_SO, else tests/node/helper.mjs builds it). A .so is loaded
// once per process, so the transpiled code's `libarkagent.so` import is a shim over the module
// already loaded.

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { transpileBindings } from './transpile.mjs';
import { loadModule } from '../../tests/node/helper.mjs';
import { tempDir } from './tmp.mjs';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/**
 * Loads the real module and the bindings over it, transpiled into a new temporary directory named
 * with `prefix`. Returns `{ native, bindings, dir, barrel }` (`barrel`: the transpiled index, for
 * app code that imports '@arkagent/bindings').
 */
export async function realBindings(prefix) {
  const native = loadModule();
  globalThis.__arkagentNative = native;
  const dir = tempDir(prefix);
  const shim = path.join(dir, 'libarkagent.mjs');
  fs.writeFileSync(shim, 'const m = globalThis.__arkagentNative;\n' +
    'export const Agent = m.Agent;\nexport const CancellationHandle = m.CancellationHandle;\n' +
    'export const ToolRegistry = m.ToolRegistry;\n');
  const barrel = transpileBindings(path.join(ROOT, 'arkts-bindings', 'src', 'main', 'ets'), dir, { 'libarkagent.so': shim });
  return { native, bindings: await import(pathToFileURL(barrel).href), dir, barrel };
}
