#!/usr/bin/env node
// ArkTS check for CI: type-checks and ArkTS-lints (strict mode, ArkTSLinter_1_1) every .ets file of
// arkts-bindings/ and entry-demo/ with OpenHarmony's TypeScript fork (ohos-typescript) against the SDK
// declarations repackaged on npm (@arkts/declarations). Only diagnostics in our own files are reported;
// the exit code is 1 when any of them is an error, 2 on a usage or setup problem, 0 otherwise.
//
// What works and why each option is set: /work/shared/notes/arkts-check.md (summarised in README.md
// beside this file).
//
// Usage:
//   node check.mjs [--json] [--native NAME=DTS]... [--root DIR] [PATH...]
// PATH: directories or .ets files (default: arkts-bindings entry-demo under --root, the repository).
// --native libarkagent.so=FILE maps `import native from 'libarkagent.so'` to a declaration file
// (default: arkts-bindings/src/main/cpp/types/libarkagent/index.d.ts under --root).
// --json prints one JSON object {files, errors, warnings, diagnostics: [...]} instead of text.

import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const HERE = path.dirname(fileURLToPath(import.meta.url));
const DEFAULT_ROOT = path.resolve(HERE, '..', '..');
const DEFAULT_DIRS = ['arkts-bindings', 'entry-demo'];
const NATIVE_DTS = 'arkts-bindings/src/main/cpp/types/libarkagent/index.d.ts';
const UNVERIFIED_NATIVE_MODULE = 28014;
// Build outputs and installed dependencies of a DevEco project: never ours to check.
const SKIP_DIRS = new Set(['node_modules', 'oh_modules', 'build', '.hvigor', '.preview', '.idea', 'libs']);

function usage(message) {
  process.stderr.write(`arkts-check: ${message}\n`);
  process.stderr.write('usage: node check.mjs [--json] [--native NAME=DTS]... [--root DIR] [PATH...]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const args = { json: false, root: DEFAULT_ROOT, natives: new Map(), paths: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--json') args.json = true;
    else if (a === '--root') args.root = path.resolve(argv[++i] ?? usage('--root needs a directory'));
    else if (a === '--native') {
      const spec = argv[++i] ?? usage('--native needs NAME=DTS');
      const eq = spec.indexOf('=');
      if (eq <= 0) usage(`bad --native ${spec}`);
      args.natives.set(spec.slice(0, eq), path.resolve(spec.slice(eq + 1)));
    } else if (a === '-h' || a === '--help') usage('help');
    else if (a.startsWith('--')) usage(`unknown option ${a}`);
    else args.paths.push(a);
  }
  if (!args.natives.has('libarkagent.so')) {
    args.natives.set('libarkagent.so', path.join(args.root, NATIVE_DTS));
  }
  return args;
}

function walkEts(dir, out) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith('.') && entry.isDirectory()) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!SKIP_DIRS.has(entry.name)) walkEts(full, out);
    } else if (entry.isFile() && entry.name.endsWith('.ets')) {
      out.push(full);
    }
  }
}

// Maps ohpm package names found under the checked trees to their entry files, so
// `import { X } from '@arkagent/bindings'` in entry-demo resolves to arkts-bindings/Index.ets: every
// oh-package.json5 maps its own `name`, and each `file:` dependency maps its key to that folder's
// `types`/`main` (or its index.d.ts / Index.ets), as ohpm would install it.
function entryOf(dir, JSON5) {
  const manifest = path.join(dir, 'oh-package.json5');
  if (fs.existsSync(manifest)) {
    const pkg = readJson5(manifest, JSON5);
    const main = pkg.types ?? pkg.main;
    if (typeof main === 'string' && fs.existsSync(path.resolve(dir, main))) return path.resolve(dir, main);
  }
  for (const name of ['index.d.ts', 'Index.ets', 'index.ets']) {
    if (fs.existsSync(path.join(dir, name))) return path.join(dir, name);
  }
  return undefined;
}

function readJson5(file, JSON5) {
  try {
    return JSON5.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`${file}: not valid JSON5: ${e.message}`);
  }
}

function findPackages(dir, JSON5, out) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    if (entry.name.startsWith('.')) continue;
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!SKIP_DIRS.has(entry.name)) findPackages(full, JSON5, out);
    } else if (entry.name === 'oh-package.json5') {
      const pkg = readJson5(full, JSON5);
      const own = entryOf(dir, JSON5);
      if (typeof pkg.name === 'string' && own !== undefined && !out.has(pkg.name)) out.set(pkg.name, own);
      for (const [name, spec] of Object.entries(pkg.dependencies ?? {})) {
        if (typeof spec !== 'string' || !spec.startsWith('file:')) continue;
        const target = entryOf(path.resolve(dir, spec.slice('file:'.length)), JSON5);
        if (target !== undefined) out.set(name, target);
      }
    }
  }
}

function listDts(dir) {
  return fs.readdirSync(dir).filter((f) => f.endsWith('.d.ts')).map((f) => path.join(dir, f));
}

// The `ets` block of compilerOptions, shaped like OpenHarmony's ets-loader compiler/tsconfig.json,
// with its component lists read from the component declarations (so they follow the SDK version).
function deriveEtsOptions(componentFiles) {
  const components = new Set();
  const instances = new Map();
  for (const file of componentFiles) {
    const text = fs.readFileSync(file, 'utf8');
    for (const m of text.matchAll(/^declare const (\w+): (\w+)Interface;/gm)) {
      if (m[1] === m[2]) components.add(m[1]);
    }
    for (const m of text.matchAll(/^declare const (\w+)Instance: (\w+)Attribute\b/gm)) {
      instances.set(m[1], `${m[2]}Attribute`);
    }
  }
  // ForEach, LazyForEach and Repeat are syntax components, never plain components.
  for (const syntax of ['ForEach', 'LazyForEach', 'Repeat']) components.delete(syntax);
  const extendComponents = [];
  for (const [name, type] of [...instances.entries()].sort()) {
    if (name === 'Common') continue;
    extendComponents.push({ name, type, instance: `${name}Instance` });
  }
  return {
    render: { method: ['build', 'pageTransition'], decorator: ['Builder', 'LocalBuilder'] },
    components: [...components].sort(),
    libs: [],
    extend: { decorator: ['Extend', 'AnimatableExtend'], components: extendComponents },
    styles: {
      decorator: 'Styles',
      component: { name: 'Common', type: 'T', instance: 'CommonInstance' },
      property: 'stateStyles',
    },
    concurrent: { decorator: 'Concurrent' },
    customComponent: 'CustomComponent',
    propertyDecorators: [
      { name: 'Link', needInitialization: false },
      { name: 'Prop', needInitialization: false },
      { name: 'ObjectLink', needInitialization: false },
      { name: 'Consume', needInitialization: false },
    ],
    emitDecorators: [
      { name: 'Entry', emitParameters: true },
      { name: 'Component', emitParameters: false },
      { name: 'Reusable', emitParameters: false },
      { name: 'CustomDialog', emitParameters: false },
      { name: 'State', emitParameters: false },
      { name: 'Prop', emitParameters: false },
      { name: 'Link', emitParameters: false },
      { name: 'Observed', emitParameters: false },
      { name: 'ObjectLink', emitParameters: false },
      { name: 'Watch', emitParameters: true },
      { name: 'Provide', emitParameters: true },
      { name: 'Consume', emitParameters: true },
      { name: 'StorageLink', emitParameters: true },
      { name: 'StorageProp', emitParameters: true },
      { name: 'LocalStorageLink', emitParameters: true },
      { name: 'LocalStorageProp', emitParameters: true },
      { name: 'BuilderParam', emitParameters: false },
    ],
    syntaxComponents: {
      paramsUICallback: ['ForEach', 'LazyForEach'],
      attrUICallback: [{ name: 'Repeat', attributes: ['each', 'template'] }],
    },
  };
}

function run() {
  const args = parseArgs(process.argv.slice(2));
  const ts = require('ohos-typescript');
  const JSON5 = require('json5');
  const declRoot = path.dirname(path.dirname(require.resolve('@arkts/declarations/dist/global.d.ts')));
  const dist = path.join(declRoot, 'dist');

  const inputs = args.paths.length > 0 ? args.paths.map((p) => path.resolve(p))
    : DEFAULT_DIRS.map((d) => path.join(args.root, d));
  const files = [];
  const packages = new Map();
  const missing = [];
  for (const input of inputs) {
    if (!fs.existsSync(input)) {
      missing.push(input);
      continue;
    }
    if (fs.statSync(input).isDirectory()) {
      walkEts(input, files);
      findPackages(input, JSON5, packages);
    } else {
      files.push(input);
    }
  }
  // Without explicit paths, both trees are required: a missing one (entry-demo moved or renamed)
  // must fail the check, never shrink it silently.
  if (args.paths.length === 0 && missing.length > 0) {
    usage(`missing ${missing.join(', ')}: the default check covers ${DEFAULT_DIRS.join(' and ')}`);
  }
  if (files.length === 0) {
    usage(`no .ets files found in ${inputs.join(', ')}`);
  }
  const ours = new Set(files.map((f) => path.resolve(f)));

  // SDK path mappings (@ohos.*, @kit.*, @arkts.*), made absolute, then ours on top.
  const base = JSON5.parse(fs.readFileSync(path.join(dist, 'tsconfig.base.json'), 'utf8'));
  const paths = {};
  for (const [name, targets] of Object.entries(base.compilerOptions.paths)) {
    paths[name] = targets.map((t) => path.resolve(dist, t));
  }
  for (const [name, target] of packages) paths[name] = [target];
  for (const [name, target] of args.natives) paths[name] = [target];

  const componentFiles = listDts(path.join(dist, 'component'));
  const options = {
    target: ts.ScriptTarget.ES2021,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.NodeJs,
    lib: ['lib.es2021.d.ts'],
    types: [],
    baseUrl: args.root,
    paths,
    experimentalDecorators: true,
    allowSyntheticDefaultImports: true,
    allowArbitraryExtensions: true,
    skipLibCheck: true,
    noEmit: true,
    // `strict` stays off like the SDK's ets-loader: the linter enforces ArkTS's own strict rules.
    strict: false,
    ets: deriveEtsOptions(componentFiles),
    // Undeclared options (API only): needed for `import x from 'libfoo.so'` and the linter.
    needDoArkTsLinter: true,
    isCompatibleVersion: false,
    compatibleSdkVersion: 12,
  };

  const rootNames = [
    ...files,
    ...componentFiles,
    path.join(dist, 'global.d.ts'),
    path.join(dist, 'index.d.ts'),
  ];
  const host = ts.createIncrementalCompilerHost(options);
  const builder = ts.createIncrementalProgram({ rootNames, options, host });
  const program = builder.getProgram();
  const typeDiags = ts.getPreEmitDiagnostics(program);
  const lintDiags = ts.ArkTSLinter_1_1.runArkTSLinter(builder, undefined, undefined, 'ArkTS_1_1');

  const seen = new Set();
  const diagnostics = [];
  const collect = (d, source) => {
    // A diagnostic without a file (an options problem) is ours too: it means the check is broken.
    const file = d.file ? path.resolve(d.file.fileName) : undefined;
    if (file !== undefined && !ours.has(file)) return;
    let line = 0;
    let column = 0;
    if (d.file && d.start !== undefined) {
      const lc = d.file.getLineAndCharacterOfPosition(d.start);
      line = lc.line + 1;
      column = lc.character + 1;
    }
    const message = ts.flattenDiagnosticMessageText(d.messageText, '\n');
    const rule = /\((arkts-[a-z0-9-]+)\)/.exec(message);
    let category = ts.DiagnosticCategory[d.category].toLowerCase();
    // TS28014 "module for 'libx.so' is not verified" is only a warning in the SDK: the native import
    // then has no declarations and every use of it goes unchecked. Here it is an error.
    if (d.code === UNVERIFIED_NATIVE_MODULE) category = 'error';
    const entry = {
      file: file ? path.relative(process.cwd(), file) : '<options>',
      line,
      column,
      category,
      source,
      code: rule ? rule[1] : `TS${d.code}`,
      message,
    };
    const key = `${entry.file}:${line}:${column}:${entry.code}:${message}`;
    if (seen.has(key)) return;
    seen.add(key);
    diagnostics.push(entry);
  };
  for (const d of typeDiags) collect(d, 'tsc');
  for (const d of lintDiags) collect(d, 'arkts-linter');
  diagnostics.sort((a, b) => a.file.localeCompare(b.file) || a.line - b.line || a.column - b.column);

  const errors = diagnostics.filter((d) => d.category === 'error').length;
  const warnings = diagnostics.filter((d) => d.category === 'warning').length;
  if (args.json) {
    process.stdout.write(`${JSON.stringify({ files: files.length, errors, warnings, missing, diagnostics }, null, 2)}\n`);
  } else {
    for (const m of missing) process.stdout.write(`note: ${m} does not exist, skipped\n`);
    for (const d of diagnostics) {
      process.stdout.write(`${d.file}:${d.line}:${d.column} ${d.category} ${d.code}: ${d.message}\n`);
    }
    process.stdout.write(`arkts-check: ${files.length} .ets files, ${errors} errors, ${warnings} warnings\n`);
  }
  return errors > 0 ? 1 : 0;
}

try {
  process.exitCode = run();
} catch (e) {
  process.stderr.write(`arkts-check: ${e.stack ?? e}\n`);
  process.exitCode = 2;
}
