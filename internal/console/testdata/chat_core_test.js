// Drives static/chat.js — the chat page's real protocol core — with a fake WebSocket and fake
// timers. Run by TestChatCore (chatcore_test.go) when node is installed: `node chat_core_test.js`.
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const { Chat, backoffDelay } = require(path.join(__dirname, '..', 'static', 'chat.js'));

// FakeSocket records what the page sends; the test plays the server.
class FakeSocket {
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.sent = [];
    FakeSocket.all.push(this);
  }
  send(data) {
    assert.equal(this.readyState, 1, 'send on a socket that is not open');
    this.sent.push(JSON.parse(data));
  }
  close() {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.onclose && this.onclose({ code: 1000 });
  }
  // server side
  open() { this.readyState = 1; this.onopen && this.onopen({}); }
  push(obj) { this.onmessage({ data: typeof obj === 'string' ? obj : JSON.stringify(obj) }); }
  drop() { this.readyState = 3; this.onclose && this.onclose({ code: 1006 }); }
  last() { return this.sent[this.sent.length - 1]; }
  ofType(t) { return this.sent.filter((m) => m.type === t); }
}
FakeSocket.all = [];

function harness(opts = {}) {
  FakeSocket.all = [];
  const timers = [];
  const events = { toasts: [], sessions: [], connection: [], controls: null, added: 0, cleared: 0 };
  const chat = new Chat({
    url: 'ws://test/v1/ws',
    settings: { user: 'demo', key: 'KEY', agent: 'demo' },
    sessionId: opts.sessionId || null,
    WebSocket: FakeSocket,
    setTimeout: (fn, ms) => { timers.push({ fn, ms }); return timers.length; },
    clearTimeout: (id) => { if (timers[id - 1]) timers[id - 1].fn = null; },
    now: () => 1700000000000,
    log: { warn() {}, info() {}, error: (...a) => { throw new Error('view error: ' + a.join(' ')); } },
    view: {
      connection: (s, info) => events.connection.push([s, info]),
      added: () => { events.added++; },
      updated: () => {},
      cleared: () => { events.cleared++; },
      controls: (c) => { events.controls = c; },
      session: (s) => events.sessions.push(s),
      toast: (t, k) => events.toasts.push([t, k]),
    },
  });
  const h = {
    chat, timers, events,
    sock: () => FakeSocket.all[FakeSocket.all.length - 1],
    // connect opens the newest socket and answers hello with ready.
    connect() {
      const s = h.sock();
      s.open();
      assert.deepEqual(s.sent[0], { type: 'hello', ts: 1700000000000, user_id: 'demo', api_key: 'KEY' });
      s.push({ type: 'ready', user_id: 'demo' });
      return s;
    },
    fireTimer() {
      const t = timers.find((x) => x.fn);
      assert.ok(t, 'no timer pending');
      const fn = t.fn;
      t.fn = null;
      fn();
      return t.ms;
    },
    msgs: () => chat.snapshot().messages.map((m) => [m.role, m.text, m.status]),
  };
  chat.start();
  return h;
}

const ev = (seq, type, fields) => Object.assign({ type, seq, session_id: 's1', event_id: 'e' + seq, ts: 1, run_id: 'run1' }, fields);

const tests = {
  'backoff doubles from 0.5 s to 5 s'() {
    assert.deepEqual([0, 1, 2, 3, 4, 5, 9].map(backoffDelay), [500, 1000, 2000, 4000, 5000, 5000, 5000]);
  },

  'new session: invoke, stream, dedupe, done'() {
    const h = harness();
    const s = h.connect();
    assert.equal(h.chat.snapshot().connected, true);
    assert.equal(s.ofType('subscribe').length, 0, 'no session, nothing to subscribe');
    assert.equal(h.events.controls.canSend, true);

    assert.equal(h.chat.send('hi'), true);
    const inv = s.last();
    assert.equal(inv.type, 'agent_invoke');
    assert.equal(inv.agent_id, 'demo');
    assert.ok(!('session_id' in inv), 'a new session omits session_id');
    assert.deepEqual(inv.message, { role: 'user', content: 'hi' });
    assert.match(inv.request_id, /^r-/);
    assert.equal(h.events.controls.canSend, false, 'input locked while the invoke is pending');
    assert.equal(h.chat.send('again'), false);
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sending']]);

    s.push(ev(2, 'run_started', { request_id: inv.request_id, agent_id: 'demo', message: { role: 'user', content: 'hi' } }));
    assert.deepEqual(h.events.sessions, ['s1']);
    let st = h.chat.snapshot();
    assert.equal(st.sessionId, 's1');
    assert.equal(st.activeRunId, 'run1');
    assert.equal(st.lastSeq, 2);
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', '', 'running']]);
    assert.equal(h.events.controls.canCancel, true);

    s.push(ev(3, 'delta', { text: 'Hel' }));
    s.push(ev(4, 'delta', { text: 'lo' }));
    s.push(ev(4, 'delta', { text: 'lo' })); // duplicate
    s.push(ev(3, 'delta', { text: 'Hel' })); // stale
    s.push(ev(6, 'state', { state: 'thinking', detail: 'hard' }));
    assert.equal(h.chat.snapshot().messages[1].detail, 'thinking — hard');
    s.push(ev(7, 'done', { usage: { total_tokens: 12 } }));
    st = h.chat.snapshot();
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', 'Hello', 'done']]);
    assert.equal(st.messages[1].detail, 'done · 12 tokens');
    assert.equal(st.activeRunId, null);
    assert.equal(st.lastSeq, 7);
    assert.equal(h.events.controls.canSend, true);
    assert.equal(h.events.controls.canCancel, false);

    // Second message goes to the same session.
    h.chat.send('more');
    assert.equal(s.last().session_id, 's1');
  },

  'dropped connection: backoff, resubscribe from last seq, nothing twice'() {
    const h = harness();
    let s = h.connect();
    h.chat.send('hi');
    s.push(ev(2, 'run_started', { request_id: s.last().request_id, message: { role: 'user', content: 'hi' } }));
    s.push(ev(3, 'delta', { text: 'a' }));
    s.drop();
    assert.equal(h.chat.snapshot().connected, false);
    assert.equal(h.chat.snapshot().connection, 'reconnecting');

    // The server is down for a while: each failed attempt waits longer.
    const waits = [];
    for (let i = 0; i < 6; i++) {
      waits.push(h.fireTimer());
      h.sock().drop();
    }
    assert.deepEqual(waits, [500, 1000, 2000, 4000, 5000, 5000]);
    h.fireTimer();
    s = h.connect();
    assert.deepEqual(s.ofType('subscribe').map((m) => [m.session_id, m.after_seq]), [['s1', 3]]);
    // The server replays from after_seq, and may overlap what was already shown.
    s.push(ev(3, 'delta', { text: 'a' }));
    s.push(ev(4, 'delta', { text: 'b' }));
    s.push(ev(5, 'done', {}));
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', 'ab', 'done']]);

    // A successful ready resets the backoff.
    s.drop();
    assert.equal(h.fireTimer(), 500);
  },

  'reload: subscribe from 0 rebuilds the conversation'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    assert.deepEqual(s.ofType('subscribe').map((m) => [m.session_id, m.after_seq]), [['s1', 0]]);
    s.push(ev(2, 'run_started', { request_id: 'r-old', message: { role: 'user', content: 'first' } }));
    s.push(ev(3, 'delta', { text: 'one' }));
    s.push(ev(5, 'done', {}));
    s.push(ev(7, 'run_started', { run_id: 'run2', request_id: 'r-old2', message: { role: 'user', content: 'second' } }));
    s.push(ev(8, 'delta', { run_id: 'run2', text: 'tw' }));
    assert.deepEqual(h.msgs(), [
      ['user', 'first', 'sent'], ['assistant', 'one', 'done'],
      ['user', 'second', 'sent'], ['assistant', 'tw', 'running'],
    ]);
    const st = h.chat.snapshot();
    assert.equal(st.activeRunId, 'run2', 'a run still going after reload is active again');
    assert.equal(st.lastSeq, 8);
    assert.equal(h.events.controls.canSend, false);
    assert.equal(h.events.controls.canCancel, true);
    assert.deepEqual(h.events.sessions, [], 'session unchanged');
  },

  'invoke error reply (no seq) fails the message; connection stays'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    s.push({ type: 'error', request_id: rid, code: 'session_busy', message: 'a run is active' });
    assert.deepEqual(h.msgs(), [['user', 'hi', 'failed']]);
    assert.match(h.chat.snapshot().messages[0].detail, /session_busy: a run is active/);
    assert.equal(h.events.toasts.length, 1);
    assert.equal(h.chat.snapshot().connected, true);
    assert.equal(h.events.controls.canSend, true);
    assert.equal(h.chat.snapshot().lastSeq, 0, 'replies carry no seq');
  },

  'run error with seq fails the run with code and message'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'state', { state: 'FAILED' }));
    s.push(ev(3, 'error', { code: 'agent_disconnected', message: 'agent closed the stream' }));
    s.push(ev(4, 'state', { state: 'FAILED' }));
    const a = h.chat.snapshot().messages[1];
    assert.equal(a.status, 'failed');
    assert.equal(a.detail, 'failed — agent_disconnected: agent closed the stream');
    assert.equal(h.chat.snapshot().activeRunId, null);
  },

  'cancel sends cancel_run and the run ends cancelled'() {
    const h = harness();
    const s = h.connect();
    h.chat.send('long job');
    s.push(ev(2, 'run_started', { request_id: s.last().request_id, message: { role: 'user', content: 'long job' } }));
    assert.equal(h.chat.cancel(), true);
    const c = s.last();
    assert.equal(c.type, 'cancel_run');
    assert.equal(c.run_id, 'run1');
    assert.equal(h.events.controls.canCancel, false, 'no double cancel');
    assert.equal(h.chat.cancel(), false);
    s.push(ev(3, 'state', { state: 'CANCELLED' }));
    s.push(ev(4, 'error', { code: 'cancelled', message: 'cancelled by user' }));
    assert.deepEqual(h.msgs()[1], ['assistant', '', 'cancelled']);
    assert.equal(h.chat.snapshot().activeRunId, null);
    assert.equal(h.events.controls.canSend, true);
  },

  'agent states that merely look final do not end the run'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'state', { state: 'done', detail: 'step 1' }));
    assert.equal(h.chat.snapshot().messages[1].status, 'running');
    assert.equal(h.chat.snapshot().messages[1].detail, 'done — step 1');
  },

  'unauthorized hello stops reconnecting'() {
    const h = harness();
    const s = h.sock();
    s.open();
    s.push({ type: 'error', code: 'unauthorized', message: 'bad key' });
    s.drop();
    assert.equal(h.chat.snapshot().connection, 'unauthorized');
    assert.equal(h.timers.filter((t) => t.fn).length, 0, 'no reconnect scheduled');
    assert.equal(h.events.toasts.length, 1);
  },

  'connection lost before run_started: message unconfirmed, then confirmed by the replay'() {
    const h = harness({ sessionId: 's1' });
    let s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    s.drop();
    assert.deepEqual(h.msgs(), [['user', 'hi', 'unconfirmed']]);
    assert.equal(h.chat.snapshot().activeRunId, null);
    h.fireTimer();
    s = h.connect();
    assert.equal(s.ofType('subscribe')[0].after_seq, 0);
    s.push(ev(1, 'run_started', { request_id: rid, message: { role: 'user', content: 'hi' } }));
    s.push(ev(2, 'delta', { text: 'yo' }));
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', 'yo', 'running']]);
  },

  'new session clears the view and ignores the old session'() {
    const h = harness();
    const s = h.connect();
    h.chat.send('hi');
    s.push(ev(2, 'run_started', { request_id: s.last().request_id, message: { role: 'user', content: 'hi' } }));
    assert.equal(h.chat.newSession(), true);
    assert.deepEqual(h.events.sessions, ['s1', null]);
    assert.equal(h.events.cleared, 1);
    let st = h.chat.snapshot();
    assert.deepEqual([st.sessionId, st.lastSeq, st.activeRunId, st.messages.length], [null, 0, null, 0]);
    s.push(ev(3, 'delta', { text: 'late' })); // old session, still subscribed on this socket
    assert.equal(h.chat.snapshot().messages.length, 0);

    h.chat.send('fresh');
    const inv = s.last();
    assert.ok(!('session_id' in inv));
    s.push(ev(4, 'done', {})); // old session again
    s.push({ type: 'run_started', seq: 2, session_id: 's2', event_id: 'x', run_id: 'run9', request_id: inv.request_id, message: { role: 'user', content: 'fresh' } });
    st = h.chat.snapshot();
    assert.equal(st.sessionId, 's2');
    assert.equal(st.lastSeq, 2);
    assert.deepEqual(h.msgs(), [['user', 'fresh', 'sent'], ['assistant', '', 'running']]);
  },

  'stale session in the URL: subscribe refused, start afresh'() {
    const h = harness({ sessionId: 'gone' });
    const s = h.connect();
    const sub = s.ofType('subscribe')[0];
    s.push({ type: 'error', request_id: sub.request_id, code: 'not_found', message: 'no such session' });
    assert.equal(h.chat.snapshot().sessionId, null);
    assert.deepEqual(h.events.sessions, [null]);
    s.drop();
    h.fireTimer();
    const s2 = h.connect();
    assert.equal(s2.ofType('subscribe').length, 0);
  },

  'garbage and unknown types are ignored'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push('not json');
    s.push({ no: 'type' });
    s.push({ type: 'mystery' });
    s.push(ev(1, 'future_event', {}));
    assert.equal(h.chat.snapshot().lastSeq, 1);
    assert.equal(h.chat.snapshot().messages.length, 0);
    assert.equal(h.chat.snapshot().connected, true);
  },

  'approval notice: decide once, closed when the run resumes'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'pay' } }));
    s.push(ev(2, 'approval_required', { approval_id: 'ap1', tool_name: 'payments.transfer', args_summary: '$10' }));
    const notice = h.chat.items.find((i) => i.role === 'notice');
    assert.equal(notice.approval.open, true);
    assert.equal(h.chat.decideApproval(notice, 'approve'), true);
    assert.deepEqual(
      (({ type, run_id, approval_id, decision }) => ({ type, run_id, approval_id, decision }))(s.last()),
      { type: 'approval_decision', run_id: 'run1', approval_id: 'ap1', decision: 'approve' });
    assert.equal(h.chat.decideApproval(notice, 'reject'), false);
    s.push(ev(3, 'state', { state: 'RUNNING' }));
    assert.equal(notice.approval.open, false);
    assert.equal(h.chat.snapshot().messages.length, 2, 'notices are not messages');
  },

  'child runs get their own bubble and do not take the active run'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'plan' } }));
    s.push(ev(2, 'run_started', { run_id: 'child', parent_run_id: 'run1', agent_id: 'helper', message: { role: 'user', content: 'internal' } }));
    s.push(ev(3, 'delta', { run_id: 'child', text: 'sub' }));
    s.push(ev(4, 'done', { run_id: 'child' }));
    assert.deepEqual(h.msgs(), [['user', 'plan', 'sent'], ['assistant', '', 'running'], ['assistant', 'sub', 'done']]);
    assert.equal(h.chat.snapshot().activeRunId, 'run1');
  },

  'stop closes for good'() {
    const h = harness();
    const s = h.connect();
    h.chat.stop();
    assert.equal(s.readyState, 3);
    assert.equal(h.timers.filter((t) => t.fn).length, 0);
    assert.equal(h.chat.snapshot().connection, 'stopped');
  },
};

let failed = 0;
for (const [name, fn] of Object.entries(tests)) {
  try {
    fn();
    console.log('ok   ' + name);
  } catch (e) {
    failed++;
    console.log('FAIL ' + name + '\n' + (e && e.stack));
  }
}
if (failed) {
  console.log(failed + ' failed');
  process.exit(1);
}
