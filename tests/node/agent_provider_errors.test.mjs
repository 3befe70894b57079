// What an app sees of a provider's error through the native module, against a local mock
// OpenAI-compatible server (127.0.0.1:0): the run fails with the code of the kind of failure, so an
// app can tell "slow down" (provider_rate_limited) from "top up the account"
// (provider_quota_exhausted, not retried) and from a refused key (provider_auth), whatever form the
// provider's error body takes, an HTTP 200 included; the provider's code and message are in the
// error message, the key is not. A rate limit is retried (2 retries by default), a 200's too; the
// others never are.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule } from './helper.mjs';
import { startMock } from './mock_openai.mjs';

const { Agent } = loadModule();
const KEY = 'sk-provider-errors-sentinel-42';

const cases = [
  [429, { error: { message: 'You exceeded your current quota', type: 'insufficient_quota', code: 'insufficient_quota' } },
    'provider_quota_exhausted', /insufficient_quota/, 1],
  [402, { error: { message: 'Insufficient Balance', type: 'unknown_error', code: 'invalid_request_error' } },
    'provider_quota_exhausted', /HTTP 402.*Insufficient Balance/, 1],
  [200, { base_resp: { status_code: 1008, status_msg: 'insufficient balance' } }, 'provider_quota_exhausted',
    /\[1008\] insufficient balance/, 1],
  [200, { base_resp: { status_code: 1002, status_msg: 'rate limit' } }, 'provider_rate_limited',
    /\[1002\] rate limit.*after 2 retries/, 3],
  [200, { base_resp: { status_code: 1026, status_msg: 'input new_sensitive' } }, 'provider_content_filtered',
    /\[1026\] input new_sensitive/, 1],
  [200, { error_code: 110, error_msg: `Access token ${KEY} invalid` }, 'provider_auth', /\[110\] Access token/, 1],
];

for (const [status, body, code, pattern, requests] of cases) {
  test(`a ${status} answering ${JSON.stringify(body).slice(0, 40)}... fails the run with ${code}`, async (t) => {
    const mock = await startMock((_i, _request, res) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    });
    t.after(() => mock.close());
    const agent = new Agent({ provider: 'custom', baseUrl: mock.baseUrl, model: 'm', apiKey: KEY });
    const out = await agent.run('s', 'hi');
    assert.equal(out.status, 'failed', JSON.stringify(out));
    assert.equal(out.errorCode, code, JSON.stringify(out));
    assert.match(out.errorMessage, pattern);
    assert.ok(!JSON.stringify(out).includes(KEY), JSON.stringify(out));
    // A quota, a refused key and refused content are not retried; a rate limit is, as a 429 is,
    // whether its body came with a 429 or a 200.
    assert.equal(mock.requests.length, requests);
  });
}
