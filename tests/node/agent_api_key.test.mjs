// A malformed API key (a line break, NUL, DEL or another byte an HTTP header value cannot hold: a
// key pasted with its newline) is refused by `new Agent` with config_invalid naming apiKey, never
// showing the key, instead of every run failing later with provider_connect.
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
