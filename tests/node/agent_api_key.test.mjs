// A malformed API key (a line break, NUL, DEL or another byte an HTTP header value cannot hold: a
// key pasted with its newline) is refused by `new Agent` with config_invalid naming apiKey, never
// showing the key, instead of every run failing later with provider_connect. So is a key with
// whitespace around it, a tab or only whitespace (a copy-paste slip), or a space or anything outside
// visible ASCII inside it (a zero-width space, a byte order mark, a look-alike letter), which was sent
// as is and answered 401 by the provider, for a preset's endpoint and a baseUrl of its own alike.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, throwsWithCode } from './helper.mjs';

const { Agent } = loadModule();

const config = (apiKey) => ({ provider: 'custom', baseUrl: 'http://127.0.0.1:9/v1', model: 'm', apiKey });

test('new Agent refuses an API key an HTTP header cannot carry', () => {
  for (const key of ['sk-SECRETabc\n', 'sk-SECRET\r\nX-Injected: 1', 'sk-SECRET\0abc', 'sk-SECRET\x7f', '\tsk-SECRET\x1b']) {
    const e = throwsWithCode(assert, () => new Agent(config(key)), 'config_invalid', 'config');
    assert.match(e.message, /^apiKey\b/, JSON.stringify(key));
    assert.ok(!e.message.includes('SECRET'), `the key is shown: ${e.message}`);
    assert.ok(!JSON.stringify(e).includes('SECRET'));
  }
});

test('new Agent accepts usable keys and no key', () => {
  for (const key of ['sk-proj-AbC_123.xyz~+/=', 'k', '', undefined]) {
    assert.ok(new Agent(config(key)), JSON.stringify(key));
  }
});

test('new Agent refuses an API key with a space or a non-ASCII character inside, saying what and where', () => {
  // Sent raw in the Authorization header, each was answered 401 by the provider.
  const cases = [
    ['sk-SECRET\u200b', 'contains a zero-width character (U+200B) at character 10'],
    ['\ufeffsk-SECRET', 'contains a byte order mark (U+FEFF) at its start'],
    ['sk-SE CRET', 'contains a space at character 6'],
    ['sk-S\u0415CRET', 'contains a non-ASCII character (U+0415) at character 5'],
    ['sk-\u{1F600}', 'contains a non-ASCII character (U+1F600) at character 4'],
  ];
  for (const [key, why] of cases) {
    for (const c of [config(key), { provider: 'openai', model: 'm', apiKey: key }]) {
      const e = throwsWithCode(assert, () => new Agent(c), 'config_invalid', 'config');
      assert.equal(e.message, `apiKey: ${why}; an API key is visible ASCII only (a copy-paste slip?)`);
    }
  }
});

test('new Agent refuses an API key with whitespace around it, or only whitespace', () => {
  const cases = [
    ['  sk-SECRETabc\n', /^apiKey: contains a line break/],
    [' sk-SECRETabc', /^apiKey: starts or ends with whitespace/],
    ['sk-SECRETabc\u3000', /^apiKey: starts or ends with whitespace/],
    ['sk-SECRET\tabc', /^apiKey: contains a tab/],
    ['   ', /^apiKey: blank/],
  ];
  for (const [key, message] of cases) {
    for (const c of [config(key), { provider: 'deepseek', model: 'deepseek-chat', apiKey: key }]) {
      const e = throwsWithCode(assert, () => new Agent(c), 'config_invalid', 'config');
      const want = c.provider === 'deepseek' && key.trim() === '' ? /^apiKey: required/ : message;
      assert.match(e.message, want, JSON.stringify(key));
      assert.ok(!e.message.includes('SECRET'), `the key is shown: ${e.message}`);
      assert.ok(!JSON.stringify(e).includes('SECRET'));
    }
  }
});
