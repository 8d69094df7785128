// The reference JavaScript A2A clients against agentplane's A2A server
// (issue 10, DESIGN §12): @a2a-js/sdk 1.3 (protocol v1.0) and @a2a-js/sdk
// 0.3 (protocol v0.3, installed as "a2a-sdk-v03"), each doing send,
// stream, input-required and its answer on the same task, cancel, get,
// not-found, another user's task, and an approval answered with a data
// part. Run by internal/e2e/a2a_interop_test.go with `node --test`; it
// passes the server and agents in the environment:
//
//   A2A_URL       agentplane's base URL
//   A2A_KEY       a user key; A2A_OTHER_KEY another user's
//   A2A_ECHO      an agent streaming "w0 w1 w2 " then done
//   A2A_ASK       an agent asking "Which city?" and answering "Sunny in <city>"
//   A2A_SLOW      an agent streaming until cancelled
//   A2A_TOOL      an agent calling the tool its JSON message names
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as v1client from '@a2a-js/sdk/client';
import { SendMessageRequest, taskStateToJSON } from '@a2a-js/sdk';
import * as v03client from 'a2a-sdk-v03/client';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set (run through internal/e2e/a2a_interop_test.go)`);
  return v;
};

// dial resolves an agent's card and returns a client of that SDK line.
async function dial(lib, agentId, key) {
  const authFetch = (url, init = {}) => {
    const headers = new Headers(init.headers);
    headers.set('Authorization', `Bearer ${key}`);
    return fetch(url, { ...init, headers });
  };
  const factory = new lib.ClientFactory(lib.ClientFactoryOptions.createFrom(lib.ClientFactoryOptions.default, {
    transports: [new lib.JsonRpcTransportFactory({ fetchImpl: authFetch })],
    cardResolver: new lib.DefaultAgentCardResolver({ fetchImpl: authFetch }),
  }));
  // The card is resolved relative to the base URL: it needs its trailing slash.
  return factory.createFromUrl(`${env('A2A_URL')}/a2a/${agentId}/`);
}

// Each SDK line has its own shapes; these adapters give the tests one view:
// tasks as {id, contextId, state, text (status message), data, artifacts
// (their text joined), history:[{role, text}]}, stream events as
// {kind: task|artifact|status, state?, text, append?, final?, task?}.
const V1 = {
  name: 'v1.0 (@a2a-js/sdk 1.3)',
  lib: v1client,
  state: (s) => taskStateToJSON(s).replace('TASK_STATE_', '').toLowerCase().replace('_', '-'),
  partsText: (parts = []) => parts.map((p) => (p.content?.$case === 'text' ? p.content.value : '')).join(''),
  partsData: (parts = []) => parts.map((p) => (p.content?.$case === 'data' ? p.content.value : undefined)).find((d) => d !== undefined),
  msg(text, extra = {}) {
    return SendMessageRequest.fromJSON({ message: { messageId: crypto.randomUUID(), role: 'ROLE_USER', parts: [{ text }], ...extra } });
  },
  dataMsg(data, task) {
    return SendMessageRequest.fromJSON({ message: { messageId: crypto.randomUUID(), role: 'ROLE_USER', parts: [{ data }], taskId: task.id, contextId: task.contextId } });
  },
  task(t) {
    return {
      id: t.id, contextId: t.contextId, state: this.state(t.status.state), text: this.partsText(t.status.message?.parts), data: this.partsData(t.status.message?.parts),
      artifacts: (t.artifacts ?? []).map((a) => this.partsText(a.parts)).join(''),
      history: (t.history ?? []).map((m) => ({ role: m.role === 1 ? 'user' : 'agent', text: this.partsText(m.parts) })),
    };
  },
  event(ev) {
    const { $case, value } = ev.payload;
    if ($case === 'task') return { kind: 'task', task: this.task(value), state: this.state(value.status.state) };
    if ($case === 'artifactUpdate') return { kind: 'artifact', text: this.partsText(value.artifact.parts), append: value.append };
    if ($case === 'statusUpdate') return { kind: 'status', state: this.state(value.status.state), text: this.partsText(value.status.message?.parts), data: this.partsData(value.status.message?.parts) };
    return { kind: $case };
  },
  get: (c, id) => c.getTask({ tenant: '', id }),
  cancel: (c, id) => c.cancelTask({ tenant: '', id, metadata: {} }),
};

const V03 = {
  name: 'v0.3 (@a2a-js/sdk 0.3)',
  lib: v03client,
  partsText: (parts = []) => parts.map((p) => (p.kind === 'text' ? p.text : '')).join(''),
  partsData: (parts = []) => parts.find((p) => p.kind === 'data')?.data,
  msg(text, extra = {}) {
    return { message: { kind: 'message', messageId: crypto.randomUUID(), role: 'user', parts: [{ kind: 'text', text }], ...extra } };
  },
  dataMsg(data, task) {
    return { message: { kind: 'message', messageId: crypto.randomUUID(), role: 'user', parts: [{ kind: 'data', data }], taskId: task.id, contextId: task.contextId } };
  },
  task(t) {
    return {
      id: t.id, contextId: t.contextId, state: t.status.state, text: this.partsText(t.status.message?.parts), data: this.partsData(t.status.message?.parts),
      artifacts: (t.artifacts ?? []).map((a) => this.partsText(a.parts)).join(''),
      history: (t.history ?? []).map((m) => ({ role: m.role, text: this.partsText(m.parts) })),
    };
  },
  event(ev) {
    if (ev.kind === 'task') return { kind: 'task', task: this.task(ev), state: ev.status.state };
    if (ev.kind === 'artifact-update') return { kind: 'artifact', text: this.partsText(ev.artifact.parts), append: !!ev.append };
    if (ev.kind === 'status-update') return { kind: 'status', state: ev.status.state, text: this.partsText(ev.status.message?.parts), data: this.partsData(ev.status.message?.parts), final: ev.final };
    return { kind: ev.kind };
  },
  get: (c, id) => c.getTask({ id }),
  cancel: (c, id) => c.cancelTask({ id }),
};

async function collect(v, stream, onEvent) {
  const out = [];
  for await (const raw of stream) {
    const ev = v.event(raw);
    out.push(ev);
    if (onEvent) await onEvent(ev);
  }
  return out;
}

for (const v of [V1, V03]) {
  describe(v.name, () => {
    test('send and stream', async () => {
      const c = await dial(v.lib, env('A2A_ECHO'), env('A2A_KEY'));
      const t = v.task(await c.sendMessage(v.msg('hello')));
      assert.equal(t.state, 'completed');
      assert.equal(t.artifacts, 'w0 w1 w2 ');
      assert.match(t.id, /^int_/);
      const evs = await collect(v, c.sendMessageStream(v.msg('again', { contextId: t.contextId })));
      assert.deepEqual(evs.map((e) => e.kind + (e.state ? ':' + e.state : '')), ['task:working', 'artifact', 'artifact', 'artifact', 'status:completed']);
      assert.equal(evs.filter((e) => e.kind === 'artifact').map((e) => e.text).join(''), 'w0 w1 w2 ');
      assert.deepEqual(evs.filter((e) => e.kind === 'artifact').map((e) => !!e.append), [false, true, true]);
      assert.equal(evs[0].task.contextId, t.contextId);
      if (v === V03) assert.equal(evs.at(-1).final, true);
    });

    test('input required, then the answer on the same task', async () => {
      const c = await dial(v.lib, env('A2A_ASK'), env('A2A_KEY'));
      const evs = await collect(v, c.sendMessageStream(v.msg('weather?')));
      const last = evs.at(-1);
      assert.equal(last.state, 'input-required');
      assert.equal(last.text, 'Which city?');
      const asked = evs[0].task;
      const done = v.task(await c.sendMessage(v.msg('Paris', { taskId: asked.id, contextId: asked.contextId })));
      assert.equal(done.id, asked.id);
      assert.equal(done.state, 'completed');
      assert.equal(done.artifacts, 'Sunny in Paris');
      assert.deepEqual(done.history.map((m) => `${m.role}:${m.text}`), ['user:weather?', 'agent:Which city?', 'user:Paris']);
      const got = v.task(await v.get(c, asked.id));
      assert.equal(got.state, 'completed');
    });

    test('cancel, get, not found, another user', async () => {
      const c = await dial(v.lib, env('A2A_SLOW'), env('A2A_KEY'));
      let id;
      let cancelled;
      const evs = await collect(v, c.sendMessageStream(v.msg('go')), async (ev) => {
        if (ev.kind === 'task') id = ev.task.id;
        if (ev.kind === 'artifact' && !cancelled) cancelled = v.task(await v.cancel(c, id));
      });
      assert.equal(cancelled.state, 'canceled');
      assert.equal(evs.at(-1).state, 'canceled');
      assert.equal(v.task(await v.get(c, id)).state, 'canceled');
      await assert.rejects(v.cancel(c, id), /cancel/i);
      await assert.rejects(v.get(c, 'int_missing'), /not found/i);
      const other = await dial(v.lib, env('A2A_SLOW'), env('A2A_OTHER_KEY'));
      await assert.rejects(v.get(other, id), /not found/i);
    });

    test('an approval answered with a data part', async () => {
      const c = await dial(v.lib, env('A2A_TOOL'), env('A2A_KEY'));
      const spec = JSON.stringify({ tool: 'transfer', args: { amount: 500, to: 'bob' } });
      const evs = await collect(v, c.sendMessageStream(v.msg(spec)));
      const asked = evs.at(-1);
      assert.equal(asked.state, 'input-required');
      assert.equal(asked.data.kind, 'approval_required');
      assert.equal(asked.data.tool_name, 'transfer');
      const task = evs[0].task;
      const after = await collect(v, c.sendMessageStream(v.dataMsg({ approval_id: asked.data.approval_id, decision: 'approve', reason: 'fine' }, task)));
      assert.equal(after.at(-1).state, 'completed');
      assert.match(after.filter((e) => e.kind === 'artifact').map((e) => e.text).join(''), /"amount":500/);
    });
  });
}
