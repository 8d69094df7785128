// Interop: the official `openai` npm package against agentplane's LLM proxy.
//
// The proxy must be running in front of agentplane's fake upstream
// (internal/fakellm), which answers "You said: <last user message>" and, when
// the request offers tools, calls the one whose words the message names
// (get_weather for "weather in …"), its "input" parameter set to the message.
// internal/llmproxy/interop_test.go starts both and runs this file; by hand:
//
//   AGENTPLANE_BASE_URL=http://127.0.0.1:8080/v1 AGENTPLANE_AGENT_KEY=… \
//   AGENTPLANE_RUN_ID=… node --test
//
// With AGENTPLANE_INTEROP_OUT set, the raw bodies received are written there
// so the Go side can check them byte for byte against what the upstream sent.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import OpenAI from 'openai';

const baseURL = process.env.AGENTPLANE_BASE_URL;
const skip = baseURL ? false : 'AGENTPLANE_BASE_URL is not set (start agentplane with the fake upstream first)';
const model = process.env.AGENTPLANE_MODEL || 'fake-gpt';

const client = new OpenAI({
  baseURL,
  apiKey: process.env.AGENTPLANE_AGENT_KEY || 'unset',
  defaultHeaders: {
    'x-run-id': process.env.AGENTPLANE_RUN_ID || '',
    'x-session-id': process.env.AGENTPLANE_SESSION_ID || '',
  },
  maxRetries: 0,
  timeout: 30_000,
});

// raw[message] = the exact body the client received for that user message.
const raw = {};
after(() => {
  if (process.env.AGENTPLANE_INTEROP_OUT) {
    writeFileSync(process.env.AGENTPLANE_INTEROP_OUT, JSON.stringify(raw));
  }
});

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather in a city',
    parameters: { type: 'object', properties: { input: { type: 'string' } }, required: ['input'] },
  },
};

test('non-streaming chat completion', { skip }, async () => {
  const msg = 'node non-streaming hello';
  const resp = await client.chat.completions
    .create({ model, messages: [{ role: 'user', content: msg }] })
    .asResponse();
  assert.equal(resp.status, 200);
  const body = await resp.text();
  raw[msg] = body;
  const completion = JSON.parse(body);
  assert.equal(completion.choices[0].message.content, `You said: ${msg}`);
  assert.ok(completion.usage.total_tokens > 0);
});

test('non-streaming chat completion, parsed by the SDK', { skip }, async () => {
  const msg = 'node parsed hello';
  const completion = await client.chat.completions.create({ model, messages: [{ role: 'user', content: msg }] });
  assert.equal(completion.choices[0].message.content, `You said: ${msg}`);
  assert.equal(completion.choices[0].finish_reason, 'stop');
});

test('streaming chat completion', { skip }, async () => {
  const msg = 'node streaming hello world';
  const stream = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: msg }],
    stream: true,
  });
  let text = '';
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    // The proxy meters the stream with include_usage but must not show the
    // extra usage chunk to a client that did not ask for it.
    assert.ok(chunk.choices.length > 0, `unexpected chunk without choices: ${JSON.stringify(chunk)}`);
    text += chunk.choices[0].delta?.content ?? '';
  }
  assert.equal(text, `You said: ${msg}`);
  assert.ok(chunks > 2);
});

test('streaming chat completion, raw bytes', { skip }, async () => {
  const msg = 'node raw stream';
  const resp = await client.chat.completions
    .create({ model, messages: [{ role: 'user', content: msg }], stream: true, stream_options: { include_usage: true } })
    .asResponse();
  assert.equal(resp.headers.get('x-accel-buffering'), 'no');
  const body = await resp.text();
  raw[msg] = body;
  assert.match(body, /"usage":\{"prompt_tokens"/);
  assert.ok(body.endsWith('data: [DONE]\n\n'));
});

test('tool call, non-streaming', { skip }, async () => {
  const msg = 'weather in Lisbon';
  const completion = await client.chat.completions.create({
    model,
    messages: [{ role: 'user', content: msg }],
    tools: [weatherTool],
  });
  const call = completion.choices[0].message.tool_calls[0];
  assert.equal(completion.choices[0].finish_reason, 'tool_calls');
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { input: msg });

  // Send the tool result back, as an agent loop does.
  const next = await client.chat.completions.create({
    model,
    messages: [
      { role: 'user', content: msg },
      completion.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: 'sunny, 21C' },
    ],
    tools: [weatherTool],
  });
  assert.equal(next.choices[0].message.content, 'Tool result: sunny, 21C');
});

test('tool call, streaming', { skip }, async () => {
  const msg = 'weather in Kyoto';
  const runner = client.chat.completions.stream({
    model,
    messages: [{ role: 'user', content: msg }],
    tools: [weatherTool],
  });
  const final = await runner.finalChatCompletion();
  const call = final.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { input: msg });
});

test('responses API, streaming', { skip }, async () => {
  const msg = 'node responses stream';
  const stream = await client.responses.create({ model, input: msg, stream: true });
  let text = '';
  let completed;
  for await (const ev of stream) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') completed = ev.response;
  }
  assert.equal(text, `You said: ${msg}`);
  assert.ok(completed.usage.input_tokens > 0);
});

test('embeddings and models', { skip }, async () => {
  const emb = await client.embeddings.create({ model, input: ['a b', 'c'] });
  assert.equal(emb.data.length, 2);
  assert.ok(emb.data[0].embedding.length > 0);
  const models = [];
  for await (const m of client.models.list()) models.push(m.id);
  assert.ok(models.includes(model), `models: ${models}`);
});

test('errors come back typed', { skip }, async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'not-a-key', maxRetries: 0 });
  await assert.rejects(
    bad.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }] }),
    (err) => err instanceof OpenAI.AuthenticationError && err.status === 401,
  );
});
