#!/usr/bin/env node
// Checks that the concrete references of the docs still name things that exist: README.md,
// docs/*.md, BENCHMARKS.md, the READMEs of arkts-bindings/, entry-demo/, entry-demo/entry/libs/
// and scripts/arkts-check/, and the comments of the native module's index.d.ts. Mechanical rules only, each precise enough to give no false
// positive on prose; what they leave out is a human's to check. Node 20, no dependencies.
//
// Run: node scripts/check-docs.mjs [--root DIR]. Prints each problem as `file:line: message`
// and exits 1 if there is any. Self-test: node --test scripts/check-docs.test.mjs.
//
// Terms. A *code span* is Markdown's `...` (it may wrap onto the next line). Fenced blocks hold
// none: a block of language `text` (README's layout) is read as prose, one of language sh, bash,
// console, shell or none as commands, any other not at all. In index.d.ts only the comments are
// read, as prose. A *command* is a code span holding a space, or a line of such a block (`#`
// starts a comment, a `\` at the end joins the next line). BENCHMARKS.md is a log, and what it
// says of past code is history: only its commands (rules 1, 4, 5) and rule 6 apply to it.
//
// Rules:
// 1. Paths. A *rooted path* starts with a top-level directory (ROOT_DIRS, or any top-level entry
//    that exists) and `/`: each one in a code span, a command or prose must exist, from the root
//    or, in a doc of a subdirectory, from the doc's directory. A code span that is a relative
//    source path (`napi/executor.rs`, `demo/OfflineScenario.ets`, or a bare `agent_runtime.rs`)
//    must end the path of a file of ROOT_DIRS; `node/<name>` (docs/spec-audit.md's short form)
//    must be tests/node/<name>.test.mjs or .mjs. Placeholders: what comes before `<`, `...`, `[`,
//    `{` or `$` must exist as a directory; a `*` in the last part is a glob that must match. Build
//    outputs (`.so`, `.hap`, `.har`) need only their directory; paths under a directory that
//    .gitignore names from the root (`/fuzz/logs`) are not checked.
// 2. Test names. A code span naming a test file (tests/**/*.rs, in rule 1's forms, or a
//    *.test.mjs file) followed by code spans with nothing between them but spaces, line breaks,
//    `(`, `,`, `and`, `or` cites tests: each such span that is a Rust identifier must be a `fn`
//    of that .rs file; each that holds a space, after a .mjs file, is a test title that must
//    appear in that file (a trailing `...` cut off). The first span of another shape ends the list.
// 3. Error codes. A *code token* is a code span that is one snake_case word with an underscore
//    (`session_busy`, or `tool_argument_*` for a family), a bare such word in index.d.ts comments,
//    or each code of a code span `error [a|b]: ...` (always a citation: the runtime's format).
//    Tokens joined by `,` `/` `and` `or` (a parenthesis after one is skipped) make a list. A list
//    is a citation when the text right before it (within its table cell) ends with a trigger:
//    `code`, `codes`, `errorCode`; `answered`, `refused`, `rejected`, `rejects`, `throw(s)`, with
//    or without a `(`; or a form of reject, refuse, fail, throw, end or answer, then at most three
//    words, then `with` or `as` (`ends the run with`), or, for the first four, `(`
//    (`refused at registration (`). So "a failed `base_resp`" or "the model answers `tool_calls`"
//    are not citations. Each code of a citation must be in the `codes` table of
//    src/error.rs (a family `x_*`: some code starts with `x_`).
// 4. Cargo commands. In a command running `cargo`, up to its `--`: `--bench X` must be a bench
//    target (benches/X.rs or a [[bench]]), `--example X` an example, `--test X` a test target,
//    `--features A,B` (or -F) features of Cargo.toml ([features], or `dep/feature` of a known
//    dependency); upper-case placeholders (`LIST`), `<...>` and `$X` are skipped.
// 5. Program flags. In a command, the `--flags` after a project program (a script under scripts/,
//    or examples/X run as `cargo run --example X -- ...` or as a built .../examples/X) must appear
//    in that program's source, literally (`--resume`). (A bare `--flag` span in prose names no
//    program, and is not checked.)
// 6. Environment variables. Every ARKAGENT_[A-Z0-9_]+ of a doc (anywhere) must be read by the
//    code, scripts or tests: it appears in a file of ROOT_DIRS (not Markdown, not a test fixture)
//    right after `"`, `'`, `$`, `{` or `.` (a string literal, a shell expansion, process.env.X).

import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT_DIRS = ['src', 'tests', 'scripts', 'benches', 'examples', 'docs', 'fuzz', 'arkts-bindings',
  'entry-demo', 'cmake', '.ci', '.cargo'];
const DOCS = ['README.md', 'BENCHMARKS.md', 'arkts-bindings/README.md', 'entry-demo/README.md', 'entry-demo/entry/libs/README.md',
  'scripts/arkts-check/README.md'];
const DTS = 'arkts-bindings/src/main/cpp/types/libarkagent/index.d.ts';
const SKIP_DIRS = new Set(['node_modules', 'target', '.git', 'oh_modules', '.build', 'build']);
const SOURCE_EXT = /\.(rs|mjs|js|ts|ets|py|sh|json5?|toml|cmake|txt)$/;
const ARTIFACT = /\.(so|hap|har)$/;
const SNAKE = /^[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?:_\*)?$/;
const IDENT = /^[a-z_][a-z0-9_]*$/;
const TRIGGER = new RegExp([
  /\b(?:codes?|errorCode|error code)/, // code `x`, error code `x`
  /\b(?:answered|refused|rejected|rejects|throws|throw)\s*\(?/, // answered `x`, throws x
  /\b(?:reject|refuse|fail|throw|end|answer)\w*(?:\s+[^\s`]+){0,3}?\s+(?:with|as)\s*\(?/, // ends the run with `x`
  /\b(?:reject|refuse|fail|throw)\w*(?:\s+[^\s`]+){0,3}?\s*\(/, // refused at registration (`x`
].map((r) => `(?:${r.source})\\s*$`).join('|'), 'i');

/** Every file under dir (relative to root), skipping build and dependency directories. */
function walk(root, dir, out = []) {
  let entries;
  try {
    entries = fs.readdirSync(path.join(root, dir), { withFileTypes: true });
  } catch {
    return out;
  }
  for (const e of entries) {
    if (SKIP_DIRS.has(e.name)) continue;
    const rel = dir === '' ? e.name : `${dir}/${e.name}`;
    if (e.isDirectory()) walk(root, rel, out);
    else out.push(rel);
  }
  return out;
}

/** What the docs may name: codes, cargo targets and features, files, the env vars the code reads. */
function facts(root) {
  const read = (p) => { try { return fs.readFileSync(path.join(root, p), 'utf8'); } catch { return ''; } };
  const codes = new Set([...read('src/error.rs').matchAll(/^\s*[A-Z0-9_]+\s*=\s*"([a-z0-9_]+)"\s*=>/gm)].map((m) => m[1]));
  const cargo = read('Cargo.toml');
  const section = (name) => (cargo.split(/^\[/m).find((s) => s.startsWith(`${name}]`)) ?? '').split('\n').slice(1);
  const keys = (lines) => lines.map((l) => /^([A-Za-z0-9_-]+)\s*=/.exec(l)?.[1]).filter(Boolean);
  const features = new Set(keys(section('features')));
  const deps = new Set([...keys(section('dependencies')), ...keys(section('dev-dependencies')), ...keys(section('build-dependencies'))]);
  const targets = (kind, dir) => {
    const names = new Set([...cargo.matchAll(new RegExp(`^\\[\\[${kind}\\]\\][^[]*?^name\\s*=\\s*"([^"]+)"`, 'gms'))].map((m) => m[1]));
    try {
      for (const f of fs.readdirSync(path.join(root, dir))) if (f.endsWith('.rs')) names.add(f.slice(0, -3));
    } catch { /* no such directory */ }
    return names;
  };
  const topLevel = new Set(ROOT_DIRS);
  for (const e of fs.readdirSync(root)) if (!SKIP_DIRS.has(e)) topLevel.add(e);
  const files = ROOT_DIRS.flatMap((d) => walk(root, d)).concat(fs.readdirSync(root).filter((f) => fs.statSync(path.join(root, f)).isFile()));
  const ignored = read('.gitignore').split('\n').map((l) => l.trim()).filter((l) => /^\/[\w./-]+$/.test(l)).map((l) => l.slice(1).replace(/\/$/, ''));
  const env = new Set();
  for (const f of files) {
    if (f.endsWith('.md') || f.startsWith('tests/fixtures/') || !(SOURCE_EXT.test(f) || !f.includes('.'))) continue;
    for (const m of read(f).matchAll(/(?<=["'${.])ARKAGENT_[A-Z0-9_]+\b/g)) env.add(m[0]);
  }
  return { codes, features, deps, benches: targets('bench', 'benches'), examples: targets('example', 'examples'),
    tests: targets('test', 'tests'), topLevel, files, ignored, env, read };
}

/** The doc's text with what is not read blanked (offsets kept): fenced blocks, or for .d.ts all but comments. */
function layout(file, text) {
  const blocks = []; // { start, end, lang } of fenced block contents
  let masked = text;
  if (file.endsWith('.d.ts')) {
    const keep = new Array(text.length).fill(false);
    for (const m of text.matchAll(/\/\*[\s\S]*?\*\/|\/\/[^\n]*/g)) for (let i = m.index; i < m.index + m[0].length; i++) keep[i] = true;
    masked = text.split('').map((c, i) => (keep[i] || c === '\n' ? c : ' ')).join('');
    masked = masked.replace(/^(\s*)(\/\*\*|\*\/|\*|\/\/)/gm, (m0, ws, tok) => ws + ' '.repeat(tok.length));
    return { masked, blocks };
  }
  const out = [];
  let offset = 0;
  let fence = null;
  for (const line of text.split('\n')) {
    const m = /^\s*(```+|~~~+)\s*([\w-]*)/.exec(line);
    if (fence === null && m) {
      fence = { mark: m[1], lang: m[2], start: offset + line.length + 1 };
      out.push(' '.repeat(line.length));
    } else if (fence !== null && m && m[1].startsWith(fence.mark[0]) && m[2] === '') {
      blocks.push({ start: fence.start, end: offset, lang: fence.lang });
      fence = null;
      out.push(' '.repeat(line.length));
    } else {
      // A `text` block (README's layout) is read as prose; the others are blanked.
      out.push(fence === null || fence.lang === 'text' ? line : ' '.repeat(line.length));
    }
    offset += line.length + 1;
  }
  masked = out.join('\n');
  return { masked, blocks };
}

/** The code spans of the masked text: { text, start, end }. */
function codeSpans(masked) {
  return [...masked.matchAll(/`((?:[^`\n]|\n(?![ \t]*\n))+?)`/g)].map((m) => ({ text: m[1].replace(/\s*\n\s*/g, ' '), start: m.index, end: m.index + m[0].length }));
}

/** The command lines of a doc: { text, start } (continuations joined, comments cut). */
function commands(text, blocks, spans) {
  const out = [];
  for (const b of blocks) {
    if (!['', 'sh', 'bash', 'console', 'shell'].includes(b.lang)) continue;
    let pending = null;
    let offset = b.start;
    for (const line of text.slice(b.start, b.end).split('\n')) {
      const code = line.replace(/(^|\s)#.*$/, '');
      const piece = pending === null ? { text: code, start: offset } : { text: `${pending.text} ${code}`, start: pending.start };
      if (/\\\s*$/.test(code)) pending = { text: piece.text.replace(/\\\s*$/, ''), start: piece.start };
      else { pending = null; if (piece.text.trim()) out.push(piece); }
      offset += line.length + 1;
    }
  }
  for (const s of spans) if (/\s/.test(s.text.trim())) out.push({ text: s.text, start: s.start + 1 });
  return out;
}

const lineOf = (text, offset) => text.slice(0, offset).split('\n').length;

/** Where a path-like token points: { kind: 'rooted' | 'bare' | 'relative', paths: candidates } or null. */
function resolve(token, f) {
  const t = token.replace(/^\.\//, '').replace(/[),;:.]+$/, '');
  if (t === '' || /^[a-z]+:\/\//.test(t)) return null;
  const first = t.split('/')[0];
  if (t.includes('/') && f.topLevel.has(first)) return { kind: 'rooted', paths: [t] };
  if (/^node\/[\w<>-]+$/.test(t)) return { kind: 'node', paths: [`tests/${t}.test.mjs`, `tests/${t}.mjs`] };
  if (/^([\w-]+\/)*[\w-]+\.(rs|mjs|ets)$/.test(t)) {
    const hits = f.files.filter((p) => p === t || p.endsWith(`/${t}`));
    return { kind: 'relative', paths: [`tests/${t}`, ...hits], name: t };
  }
  return null;
}

/** Whether a rooted path exists, by rule 1's placeholder and glob handling. */
function exists(root, p) {
  let cut = p.search(/<|\.\.\.|\[|\{|\$/);
  if (ARTIFACT.test(p) && cut < 0) cut = p.lastIndexOf('/') + 1;
  if (cut >= 0) {
    const dir = p.slice(0, cut).replace(/[^/]*$/, '');
    return dir === '' || fs.existsSync(path.join(root, dir));
  }
  if (p.includes('*')) {
    const parts = p.replace(/\/$/, '').split('/');
    const dir = parts.slice(0, -1).join('/');
    if (dir.includes('*')) return fs.existsSync(path.join(root, dir.slice(0, dir.indexOf('*')).replace(/[^/]*$/, '')));
    const re = new RegExp(`^${parts.at(-1).replace(/[.+^$()|\\]/g, '\\$&').replace(/\*/g, '.*')}$`);
    try { return fs.readdirSync(path.join(root, dir)).some((n) => re.test(n)); } catch { return false; }
  }
  return fs.existsSync(path.join(root, p));
}

/** The file a test citation names, or null. */
function testFile(root, f, token) {
  const r = resolve(token, f);
  if (r === null) return null;
  const hit = r.paths.find((p) => fs.existsSync(path.join(root, p)) && fs.statSync(path.join(root, p)).isFile());
  if (hit === undefined) return null;
  if (/^tests\/.*\.rs$/.test(hit) || /\.test\.mjs$/.test(hit)) return hit;
  return null;
}

function checkDoc(root, f, file, problems) {
  const text = f.read(file);
  const { masked, blocks } = layout(file, text);
  const docDir = path.dirname(file) === '.' || file.endsWith('.d.ts') ? '' : path.dirname(file);
  // BENCHMARKS.md is a log: what it says of past code is history, so only its commands are checked.
  const log = file === 'BENCHMARKS.md';
  const report = (offset, message) => problems.push(`${file}:${lineOf(text, offset)}: ${message}`);
  const spans = codeSpans(masked);
  const inSpan = (i) => spans.some((s) => i >= s.start && i < s.end);

  // Rule 1: paths, in code spans, commands and prose.
  const seen = new Set();
  const checkPath = (token, offset, spanWhole) => {
    const r = resolve(token, f);
    if (r === null || (r.kind !== 'rooted' && !spanWhole)) return;
    const key = `${offset}:${token}`;
    if (seen.has(key)) return;
    seen.add(key);
    if (r.kind === 'rooted') {
      const p = r.paths[0];
      if (f.ignored.some((g) => p === g || p.startsWith(`${g}/`))) return;
      if (!exists(root, p) && !(docDir !== '' && exists(root, `${docDir}/${p}`))) report(offset, `path does not exist: ${p}`);
    } else if (r.kind === 'node') {
      if (!r.paths.some((p) => exists(root, p))) report(offset, `path does not exist: ${r.paths[0]}`);
    } else if (r.paths.length === 1) {
      report(offset, `no file ${r.name} in the repository`);
    }
  };
  for (const s of spans) {
    const t = s.text.trim();
    if (!log && !/\s/.test(t)) checkPath(t, s.start, true);
  }
  const cmds = commands(text, blocks, spans);
  for (const c of cmds) {
    for (const m of c.text.matchAll(/[^\s"'=]+/g)) checkPath(m[0], c.start + m.index, false);
  }
  for (const m of masked.matchAll(/(?<![\w./$<>-])(?:[\w.-]+\/)+[\w.<>*-]*[\w>*/]/g)) {
    if (!log && !inSpan(m.index)) checkPath(m[0], m.index, false);
  }

  // Rule 2: test names after a test file.
  for (let i = 0; i < (log ? 0 : spans.length); i++) {
    const cited = testFile(root, f, spans[i].text.trim());
    if (cited === null) continue;
    const body = f.read(cited);
    for (let j = i + 1; j < spans.length; j++) {
      const between = masked.slice(spans[j - 1].end, spans[j].start);
      if (!/^(?:\s|,|\(|\band\b|\bor\b)*$/.test(between)) break;
      const name = spans[j].text.trim();
      if (cited.endsWith('.rs') && IDENT.test(name)) {
        if (!new RegExp(`\\bfn\\s+${name}\\b`).test(body)) report(spans[j].start, `${cited} has no fn ${name}`);
      } else if (cited.endsWith('.mjs') && /\s/.test(name)) {
        const title = name.replace(/\s*(\.\.\.|…)$/, '');
        if (!body.includes(title)) report(spans[j].start, `${cited} has no test "${title}"`);
      } else {
        break;
      }
    }
  }

  // Rule 3: error codes.
  const tokens = [];
  for (const s of spans) {
    const t = s.text.trim();
    const coded = /^error \[([^\]]+)\]/.exec(t);
    if (coded) {
      for (const c of coded[1].split(/\\?\|/)) if (SNAKE.test(c)) tokens.push({ code: c, start: s.start, end: s.end, always: true });
    } else if (SNAKE.test(t)) {
      tokens.push({ code: t, start: s.start, end: s.end });
    }
  }
  if (file.endsWith('.d.ts')) {
    for (const m of masked.matchAll(/(?<![\w`'".\-/[])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?:_\*)?(?![\w`'"(])/g)) {
      if (!inSpan(m.index) && SNAKE.test(m[0])) tokens.push({ code: m[0], start: m.index, end: m.index + m[0].length });
    }
    tokens.sort((a, b) => a.start - b.start);
  }
  const skipParen = (i) => {
    const j = masked.slice(i).search(/\S/);
    if (j < 0 || masked[i + j] !== '(') return i;
    let depth = 0;
    for (let k = i + j; k < masked.length; k++) {
      if (masked[k] === '(') depth++;
      else if (masked[k] === ')' && --depth === 0) return k + 1;
    }
    return i;
  };
  let listCited = false;
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i];
    const prev = tokens[i - 1];
    const joined = prev !== undefined && /^(?:\s|,|\/|\band\b|\bor\b)*$/.test(masked.slice(skipParen(prev.end), t.start));
    if (!joined) {
      const before = masked.slice(Math.max(0, t.start - 80), t.start).replace(/\s+/g, ' ').replace(/^.*[|]/, '');
      listCited = TRIGGER.test(before);
    }
    if (log || !(t.always || listCited)) continue;
    const known = t.code.endsWith('_*') ? [...f.codes].some((c) => c.startsWith(t.code.slice(0, -1))) : f.codes.has(t.code);
    if (!known) report(t.start, `error code ${t.code} is not in the codes table of src/error.rs`);
  }

  // Rules 4 and 5: cargo commands and program flags.
  for (const c of cmds) {
    const words = [...c.text.matchAll(/[^\s]+/g)].map((m) => ({ w: m[0].replace(/^["']|["']$/g, ''), at: c.start + m.index }));
    for (let i = 0; i < words.length; i++) {
      if (words[i].w !== 'cargo') continue;
      let k = i + 1;
      let example = null;
      for (; k < words.length && !['--', '&&', '||', ';', '|'].includes(words[k].w); k++) {
        const [flag, inline] = words[k].w.split('=');
        const value = inline ?? words[k + 1]?.w;
        if (value === undefined || /^<|^[A-Z]+$|^\$/.test(value)) continue;
        if (flag === '--bench' && !f.benches.has(value)) report(words[k].at, `no bench target ${value} (benches/, Cargo.toml)`);
        if (flag === '--example') {
          example = value;
          if (!f.examples.has(value)) report(words[k].at, `no example ${value} (examples/, Cargo.toml)`);
        }
        if (flag === '--test' && !f.tests.has(value)) report(words[k].at, `no test target ${value} (tests/, Cargo.toml)`);
        if (flag === '--features' || flag === '-F') {
          for (const feat of value.split(',').filter(Boolean)) {
            const ok = feat.includes('/') ? f.deps.has(feat.split('/')[0]) : f.features.has(feat);
            if (!ok) report(words[k].at, `no cargo feature ${feat} (Cargo.toml)`);
          }
        }
      }
      if (example !== null && words[k]?.w === '--' && f.examples.has(example)) {
        checkFlags(f, `examples/${example}.rs`, words.slice(k + 1), report);
      }
    }
    for (let i = 0; i < words.length; i++) {
      const w = words[i].w;
      const program = /^(?:\.\/)?scripts\/[\w./-]+\.(?:sh|py|mjs)$/.test(w) ? w.replace(/^\.\//, '')
        : /\/examples\/([\w-]+)$/.test(w) && f.examples.has(w.split('/').at(-1)) ? `examples/${w.split('/').at(-1)}.rs` : null;
      const prevWord = words[i - 1]?.w;
      const runs = i === 0 || ['bash', 'sh', 'python3', 'python', 'node', 'exec', '&&', ';', '|'].includes(prevWord) || /^[A-Z_]+=/.test(prevWord);
      if (program !== null && runs && fs.existsSync(path.join(root, program))) checkFlags(f, program, words.slice(i + 1), report);
    }
  }

  // Rule 6: environment variables.
  for (const m of text.matchAll(/\bARKAGENT_[A-Z0-9_]*[A-Z0-9]\b/g)) {
    if (!f.env.has(m[0])) report(m.index, `environment variable ${m[0]} is read nowhere in the code, scripts or tests`);
  }
}

/** Rule 5: the `--flags` given to a program must appear in its source. */
function checkFlags(f, program, words, report) {
  const body = f.read(program);
  for (const { w, at } of words) {
    if (['&&', '||', ';', '|'].includes(w)) break;
    const flag = /^--[a-z][\w-]*/.exec(w)?.[0];
    if (flag !== undefined && !new RegExp(`${flag}(?![\\w-])`).test(body)) report(at, `${program} has no flag ${flag}`);
  }
}

/** Every problem of the docs under root, as `file:line: message`. */
export function checkDocs(root) {
  const f = facts(root);
  const docs = [...DOCS];
  try {
    for (const d of fs.readdirSync(path.join(root, 'docs')).sort()) if (d.endsWith('.md')) docs.push(`docs/${d}`);
  } catch { /* no docs directory */ }
  docs.push(DTS);
  const problems = [];
  for (const file of docs) {
    if (!fs.existsSync(path.join(root, file))) continue;
    const found = [];
    checkDoc(root, f, file, found);
    const line = (p) => Number(p.split(':')[1]);
    problems.push(...found.sort((a, b) => line(a) - line(b)));
  }
  return problems;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const at = process.argv.indexOf('--root');
  const root = at > 0 ? path.resolve(process.argv[at + 1]) : path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const problems = checkDocs(root);
  for (const p of problems) console.log(p);
  if (problems.length > 0) {
    console.error(`check-docs: ${problems.length} problem(s)`);
    process.exit(1);
  }
  console.log('check-docs: ok');
}
