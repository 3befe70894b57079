// A local mock of an OpenAI-compatible chat-completions server for the node tests: listens on
// 127.0.0.1:0, records every request (headers and JSON body) and answers with what the test's
// handler says, typically an SSE stream written in small pieces.
import { createServer } from 'node:http';

/** SSE text of chunks streaming a tool call: id and name first, then the arguments in pieces. */
export function toolCallChunks(id, name, args, pieces = 4) {
  const size = Math.ceil(args.length / pieces);
  const chunks = [
    { choices: [{ index: 0, delta: { role: 'assistant', content: null, tool_calls: [{ index: 0, id, type: 'function', function: { name, arguments: '' } }] }, finish_reason: null }] },
  ];
  for (let i = 0; i < args.length; i += size) {
    chunks.push({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: args.slice(i, i + size) } }] }, finish_reason: null }] });
  }
  chunks.push({ choices: [{ index: 0, delta: {}, finish_reason: 'tool_calls' }] });
  chunks.push({ choices: [], usage: { prompt_tokens: 20, completion_tokens: 10, total_tokens: 30 } });
  return chunks;
}

/** Chunks streaming a text answer word by word. */
export function textChunks(text) {
  const chunks = [{ choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null }] }];
  for (const word of text.match(/\S+\s*/g)) {
    chunks.push({ choices: [{ index: 0, delta: { content: word }, finish_reason: null }] });
  }
  chunks.push({ choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] });
  chunks.push({ choices: [], usage: { prompt_tokens: 40, completion_tokens: 5, total_tokens: 45 } });
  return chunks;
}

/** Writes the chunks as an SSE response, a few ms apart, then `[DONE]` (unless `hang`). */
export async function streamChunks(res, chunks, { hang = false } = {}) {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  for (const chunk of chunks) {
    if (res.destroyed) return;
    res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    await new Promise((r) => setTimeout(r, 3));
  }
  if (!hang) {
    res.end('data: [DONE]\n\n');
  }
}

/**
 * Starts the server. `handler(index, request, res)` answers request number `index` (0-based);
 * `request` is {authorization, body (parsed JSON), raw (the body text)}. Returns {baseUrl,
 * requests, closed (a count of responses whose connection closed before they ended), close()}.
 */
export async function startMock(handler) {
  const requests = [];
  const state = { closedEarly: 0 };
  const server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (d) => (raw += d));
    req.on('end', () => {
      const request = { authorization: req.headers.authorization, raw, body: JSON.parse(raw), url: req.url };
      const index = requests.push(request) - 1;
      res.on('close', () => {
        if (!res.writableEnded) state.closedEarly++;
      });
      Promise.resolve(handler(index, request, res)).catch((e) => {
        res.destroy(e);
      });
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    state,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(resolve);
      }),
  };
}
