// Temporary directories of one test file, removed when its tests end (node --test runs each file in
// its own process, so the `after` below belongs to the importing file).
import { after } from 'node:test';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const made = [];

after(() => {
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true });
});

/** A new empty directory under the system temp dir, named `<prefix>XXXXXX`; removed after the tests. */
export function tempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  made.push(dir);
  return dir;
}
