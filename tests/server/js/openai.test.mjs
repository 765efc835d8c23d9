// openai.test.mjs — the official `openai` npm client against `cmf serve` (run by ../js_openai.sh).
// argv[2]: refs.json from server_refgen: the model paths and texts generated in process by the library, which the
// server's answers must reproduce byte for byte (texts compared as UTF-8 bytes against their hex).
// Two servers: stories260K (completions, chat through the fallback template, JSON mode, models, tokenize, errors) and the
// Qwen3-architecture "chain" chat model with an API key, whose greedy answer is a fixed CJK + emoji text with
// characters split across tokens (streamed chat and completions must reassemble it byte for byte).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';
import { startServer } from './serve.mjs';

const refs = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const KEY = 'node-test-key';
let failures = 0;
const results = [];

async function check(name, fn) {
  try {
    await fn();
    results.push(`ok   ${name}`);
  } catch (e) {
    failures++;
    results.push(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

const hex = (s) => Buffer.from(s, 'utf8').toString('hex');

// Every streamed piece must be valid UTF-8 on its own: a replacement character means a split was sent.
function assertNoReplacement(pieces) {
  for (const p of pieces) assert.ok(!p.includes('\ufffd'), `a streamed piece holds U+FFFD: ${JSON.stringify(p)}`);
}

async function streamCompletion(client, params) {
  const stream = await client.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const pieces = [];
  let finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.text) pieces.push(c.text);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { pieces, text: pieces.join(''), finish, usage };
}

async function streamChat(client, params) {
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const pieces = [];
  let finish = null, usage = null, role = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) pieces.push(c.delta.content);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  return { pieces, text: pieces.join(''), finish, usage, role };
}

// ---- stories260K, no key ---------------------------------------------------------------------------------------
const stories = await startServer(refs.stories_model, ['--parallel', '2', '-c', '256', '-t', '1']);
try {
  const client = new OpenAI({ baseURL: `${stories.url}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 30000 });
  const g = refs.stories_greedy;

  await check('models.list', async () => {
    const list = await client.models.list();
    assert.equal(list.data.length, 1);
    assert.equal(list.data[0].id, 'stories');
    assert.equal(list.data[0].object, 'model');
  });

  await check('models.retrieve (GET /v1/models/{id}): the listed object; another id is a NotFoundError', async () => {
    const list = await client.models.list();
    const m = await client.models.retrieve('stories');
    assert.deepEqual({ ...m, created: 0 }, { ...list.data[0], created: 0 });
    await assert.rejects(client.models.retrieve('gpt-4o-mini'),
      (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.error?.param === 'model');
  });

  await check('completions.create (greedy, text prompt) = in-process generation', async () => {
    const r = await client.completions.create({ model: 'stories', prompt: g.prompt, temperature: 0, max_tokens: g.max_tokens });
    assert.equal(r.object, 'text_completion');
    assert.equal(hex(r.choices[0].text), g.text_hex);
    assert.equal(r.choices[0].finish_reason, g.completion_tokens < g.max_tokens ? 'stop' : 'length');
    assert.equal(r.usage.prompt_tokens, g.prompt_ids.length);
    assert.equal(r.usage.completion_tokens, g.completion_tokens);
  });

  await check('completions.create stream (token-id prompt) = in-process generation', async () => {
    const r = await streamCompletion(client, { model: 'stories', prompt: g.prompt_ids, temperature: 0, max_tokens: g.max_tokens });
    assert.equal(hex(r.text), g.text_hex);
    assert.ok(r.pieces.length > 5, 'streamed in pieces');
    assert.equal(r.usage.completion_tokens, g.completion_tokens);
    assert.ok(r.finish);
  });

  const st = refs.stop_split;
  await check(`stop string across tokens (${JSON.stringify(st.stop)}) never appears`, async () => {
    const s = await streamCompletion(client, { model: 'stories', prompt: g.prompt, temperature: 0, max_tokens: g.max_tokens, stop: [st.stop] });
    assert.equal(hex(s.text), st.text_hex);
    assert.ok(!s.text.includes(st.stop));
    assert.equal(s.finish, 'stop');
    const r = await client.completions.create({ model: 'stories', prompt: g.prompt, temperature: 0, max_tokens: g.max_tokens, stop: st.stop });
    assert.equal(hex(r.choices[0].text), st.text_hex);
    assert.equal(r.choices[0].finish_reason, 'stop');
  });

  await check('chat.completions.create (plain) through the fallback template', async () => {
    const r = await client.chat.completions.create({ model: 'stories', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 12, seed: 5 });
    assert.equal(r.object, 'chat.completion');
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.usage.completion_tokens, 12);
    assert.equal(r.choices[0].finish_reason, 'length');
    const s = await streamChat(client, { model: 'stories', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 12, seed: 5 });
    assert.equal(s.role, 'assistant');
    assert.equal(s.text, r.choices[0].message.content, 'streamed = non-streamed with the same seed');
    assert.equal(s.usage.completion_tokens, 12);
  });

  await check('JSON mode: response_format json_object through the client starts an object, streamed = not', async () => {
    const params = { model: 'stories', messages: [{ role: 'user', content: 'Reply in JSON' }], max_tokens: 16, seed: 3, response_format: { type: 'json_object' } };
    const r = await client.chat.completions.create(params);
    const text = r.choices[0].message.content;
    assert.equal(text.trimStart()[0], '{', `not an object: ${JSON.stringify(text)}`);
    if (r.choices[0].finish_reason === 'stop') assert.equal(typeof JSON.parse(text), 'object');
    else assert.equal(r.choices[0].finish_reason, 'length');
    const s = await streamChat(client, params);
    assert.equal(s.text, text, 'streamed = non-streamed with the same seed');
    await assert.rejects(client.chat.completions.create({ ...params, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } } }),
      (e) => e instanceof OpenAI.BadRequestError && e.error.param === 'response_format');
  });

  await check('POST /tokenize and /detokenize', async () => {
    const r = await fetch(`${stories.url}/tokenize`, { method: 'POST', body: JSON.stringify({ content: g.prompt, add_special: true }) });
    assert.equal(r.status, 200);
    const j = await r.json();
    assert.deepEqual(j.tokens, g.prompt_ids);
    const d = await fetch(`${stories.url}/detokenize`, { method: 'POST', body: JSON.stringify({ tokens: g.prompt_ids.slice(1) }) });
    assert.equal((await d.json()).content.trim(), g.prompt);
  });

  await check('errors: 400 bad fields, 404 unknown model / route, 400 prompt over the context', async () => {
    const expectStatus = async (p, status, param) => {
      try {
        await p;
      } catch (e) {
        assert.ok(e instanceof OpenAI.APIError, `not an APIError: ${e}`);
        assert.equal(e.status, status, e.message);
        assert.ok(e.error && typeof e.error.message === 'string', 'OpenAI-shaped error body');
        if (param !== undefined) assert.equal(e.error.param, param);
        return;
      }
      assert.fail(`no ${status}`);
    };
    await expectStatus(client.completions.create({ model: 'stories', prompt: 'x', max_tokens: -1 }), 400, 'max_tokens');
    await expectStatus(client.completions.create({ model: 'stories', prompt: 'x', temperature: 'hot' }), 400, 'temperature');
    await expectStatus(client.chat.completions.create({ model: 'stories', messages: [] }), 400, 'messages');
    await expectStatus(client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] }), 404, 'model');
    await expectStatus(client.completions.create({ model: 'stories', prompt: 'once '.repeat(400) }), 400, 'prompt');
    const r = await fetch(`${stories.url}/v1/nothing`);
    assert.equal(r.status, 404);
    const b = await fetch(`${stories.url}/v1/completions`, { method: 'POST', body: '{"prompt": ' });
    assert.equal(b.status, 400);
    assert.equal((await b.json()).error.type, 'invalid_request_error');
  });
} finally {
  const code = await stories.stop();
  if (code !== 0) { failures++; results.push(`FAIL stories server exit status ${code}`); }
}

// ---- chat model, API key -----------------------------------------------------------------------------------------
const chat = await startServer(refs.chat_model, ['--api-key', KEY, '--parallel', '2', '-c', '512', '-t', '1']);
try {
  const client = new OpenAI({ baseURL: `${chat.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 30000 });

  await check('401 without the key', async () => {
    const bad = new OpenAI({ baseURL: `${chat.url}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
  });

  const sc = refs.wide_completion;
  await check(`completions stream: CJK/emoji text (${sc.split_tokens} token(s) splitting a character) byte-exact`, async () => {
    assert.ok(sc.split_tokens > 0, 'the reference text has characters split across tokens');
    const r = await streamCompletion(client, { model: 'chat', prompt: sc.prompt, temperature: sc.temperature, seed: sc.seed, max_tokens: sc.max_tokens });
    assertNoReplacement(r.pieces);
    assert.equal(r.finish, 'stop');
    assert.equal(hex(r.text), sc.text_hex);
    assert.equal(r.usage.completion_tokens, sc.completion_tokens);
  });

  const ch = refs.wide_chat;
  await check(`chat stream: CJK/emoji text (${ch.split_tokens} token(s) splitting a character) byte-exact`, async () => {
    const params = { model: 'chat', messages: ch.messages, temperature: ch.temperature, seed: ch.seed, max_tokens: ch.max_tokens };
    assert.ok(ch.split_tokens > 0, 'the reference text has characters split across tokens');
    const s = await streamChat(client, params);
    assertNoReplacement(s.pieces);
    assert.equal(s.finish, 'stop');
    assert.equal(hex(s.text), ch.text_hex);
    assert.equal(s.usage.prompt_tokens, ch.prompt_tokens);
    assert.equal(s.usage.completion_tokens, ch.completion_tokens);
    const r = await client.chat.completions.create(params);
    assert.equal(hex(r.choices[0].message.content), ch.text_hex);
  });
} finally {
  const code = await chat.stop();
  if (code !== 0) { failures++; results.push(`FAIL chat server exit status ${code}`); }
}

for (const r of results) console.log(r);
console.log(failures ? `${failures} check(s) failed` : `all ${results.length} checks passed`);
process.exit(failures ? 1 : 0);
