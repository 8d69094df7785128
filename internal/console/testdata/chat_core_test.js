// Drives static/chat.js — the chat page's real protocol core — with a fake WebSocket and fake
// timers. Run by TestChatCore (chatcore_test.go) when node is installed: `node chat_core_test.js`.
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const { Chat, backoffDelay, clientNow, timeMs } = require(path.join(__dirname, '..', 'static', 'chat.js'));

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
  const clock = { t: 1700000000000 };
  const events = { toasts: [], sessions: [], connection: [], controls: null, added: 0, cleared: 0, order: [], pendingNew: [], drafts: [] };
  const chat = new Chat({
    url: 'ws://test/v1/ws',
    settings: { user: 'demo', key: 'KEY', agent: 'demo' },
    sessionId: opts.sessionId || null,
    pendingNewSession: opts.pendingNewSession,
    // Never the runtime's: a test that looks a session up says what the server answers.
    fetch: opts.fetch || (() => Promise.reject(new Error('no fetch in this test'))),
    WebSocket: FakeSocket,
    setTimeout: (fn, ms) => { timers.push({ fn, ms, at: clock.t + ms }); return timers.length; },
    clearTimeout: (id) => { if (timers[id - 1]) timers[id - 1].fn = null; },
    now: () => clock.t,
    env: opts.env || { timeZone: 'Europe/Paris', locale: 'fr-FR', offsetMinutes: 60 },
    clientTools: opts.clientTools,
    log: { warn() {}, info() {}, error: (...a) => { throw new Error('view error: ' + a.join(' ')); } },
    view: {
      connection: (s, info) => events.connection.push([s, info]),
      added: (item, before) => { events.added++; events.order.push([item.id, before ? before.id : null]); },
      updated: () => {},
      cleared: () => { events.cleared++; },
      controls: (c) => { events.controls = c; },
      session: (s) => events.sessions.push(s),
      newSessionPending: (p) => events.pendingNew.push(['pending', p]),
      newSessionSettled: (p) => events.pendingNew.push(['settled', p.requestId]),
      restoreDraft: (t) => events.drafts.push(t),
      toast: (t, k) => events.toasts.push([t, k]),
    },
  });
  const h = {
    chat, timers, events, clock,
    sock: () => FakeSocket.all[FakeSocket.all.length - 1],
    // connect opens the newest socket and answers hello with ready.
    connect() {
      const s = h.sock();
      s.open();
      assert.deepEqual(s.sent[0], { type: 'hello', ts: clock.t, user_id: 'demo', api_key: 'KEY' });
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
    // card is the tool or approval card for an id; cards lists those of a kind.
    card: (id) => chat.items.find((i) => (i.tool && i.tool.toolCallId === id) || (i.approval && i.approval.approvalId === id)),
    cards: (kind) => chat.items.filter((i) => i.kind === kind),
    // advance moves the fake clock on and runs the timers that are then due.
    advance(ms) {
      clock.t += ms;
      for (const t of timers.slice()) {
        if (t.fn && t.at <= clock.t) { const fn = t.fn; t.fn = null; fn(); }
      }
    },
  };
  chat.start();
  return h;
}

// FakeAPI plays the HTTP API a user key reaches: GET /v1/sessions and a session's events.
// sessions: the listing (newest first); events: session id → its events, as the API lists them.
class FakeAPI {
  constructor() {
    this.sessions = [];
    this.events = {};
    this.calls = [];
    this.down = false;
    this.fetch = (url, init) => {
      this.calls.push([url, init]);
      if (this.down) return Promise.reject(new TypeError('Failed to fetch'));
      const u = new URL(url, 'http://test');
      let body;
      let m;
      if (u.pathname === '/v1/sessions') {
        body = { sessions: this.sessions.filter((x) => x.user_id === u.searchParams.get('user_id')), next_cursor: '' };
      } else if ((m = /^\/v1\/sessions\/([^/]+)\/events$/.exec(u.pathname))) {
        const evs = this.events[decodeURIComponent(m[1])];
        if (!evs) return Promise.resolve({ ok: false, status: 404, json: () => Promise.resolve({}) });
        body = { events: evs.filter((e) => e.seq > Number(u.searchParams.get('after_seq'))).slice(0, Number(u.searchParams.get('limit'))) };
      } else {
        return Promise.resolve({ ok: false, status: 404, json: () => Promise.resolve({}) });
      }
      return Promise.resolve({ ok: true, status: 200, json: () => Promise.resolve(JSON.parse(JSON.stringify(body))) });
    };
  }
  // add creates session id whose first run was started by requestId (of agent, for user).
  add(id, requestId, { agent = 'demo', user = 'demo', type = 'run_started', parent = '' } = {}) {
    this.sessions.unshift({ session_id: id, user_id: user, agents: [agent] });
    this.events[id] = [
      { seq: 1, type: 'user_input', run_id: 'run1', parent_run_id: '', payload: { message: { role: 'user', content: 'hi' } } },
      { seq: 2, type, run_id: 'run1', parent_run_id: parent, payload: { request_id: requestId, agent_id: agent, message: { role: 'user', content: 'hi' } } },
    ];
  }
  paths() { return this.calls.map((c) => c[0]); }
}

// settle lets the page's fetch promises run to their end.
const settle = () => new Promise((r) => setImmediate(r));

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

  // Issue 8 item 15: after a reload the server re-sends the pending approval (no seq) while it
  // replays the log; the re-send may come first. The page must still show the user's message,
  // then the card, and the approval must work.
  'reload with a pending approval: the re-send before the replay waits for it'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    const req = { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 'demo.transfer', args_summary: '{"amount":250,"to":"Bob"}', expires_at: h.clock.t + 300000 };
    s.push(Object.assign({ type: 'approval_required', session_id: 's1', run_id: 'run1' }, req)); // the re-send
    assert.deepEqual(h.msgs(), [], 'nothing shown ahead of the replay');
    s.push(ev(1, 'run_started', { request_id: 'r-old', agent_id: 'demo', message: { role: 'user', content: 'Send 250 to Bob' } }));
    s.push(ev(2, 'state', { state: 'calling_tool' }));
    s.push(ev(3, 'delta', { text: 'This needs approval…' }));
    s.push(ev(4, 'approval_required', req));
    s.push(ev(5, 'state', { state: 'PAUSED_WAITING_APPROVAL', detail: { tool_call_id: 'tc1', approval_id: 'ap1', outcome: 'WAITING_APPROVAL' } }));
    assert.deepEqual(h.msgs(), [['user', 'Send 250 to Bob', 'sent'], ['assistant', 'This needs approval…', 'running']]);
    assert.deepEqual(h.chat.items.map((i) => i.role + (i.kind ? ':' + i.kind : '')), ['user', 'assistant', 'notice:approval']);
    assert.equal(h.cards('approval').length, 1);
    const card = h.card('ap1');
    assert.equal(card.approval.state, 'pending');
    // The held re-send is dropped, not shown later as a second card.
    h.advance(5000);
    assert.equal(h.cards('approval').length, 1);
    assert.equal(h.chat.decideApproval(card, 'approve', ''), true);
    assert.equal(s.ofType('approval_decision').length, 1);
    s.push(ev(6, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc1', approval_id: 'ap1', outcome: 'DISPATCHED' } }));
    s.push(ev(7, 'done', {}));
    assert.equal(card.approval.state, 'approved');
    assert.deepEqual(h.msgs(), [['user', 'Send 250 to Bob', 'sent'], ['assistant', 'This needs approval…', 'done']]);
  },

  'reload with a pending client tool: the re-send before the replay runs the tool once'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    const req = { tool_call_id: 'tc1', tool_name: 'client.now', args: {}, deadline_ts: h.clock.t + 15000 };
    s.push(Object.assign({ type: 'tool_request', session_id: 's1', run_id: 'run1' }, req));
    assert.equal(s.ofType('tool_result').length, 0);
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'What time is it?' } }));
    s.push(ev(2, 'tool_request', req));
    assert.deepEqual(h.msgs(), [['user', 'What time is it?', 'sent'], ['assistant', '', 'running']]);
    assert.equal(h.cards('tool').length, 1);
    assert.equal(s.ofType('tool_result').length, 1);
    h.advance(5000);
    assert.equal(s.ofType('tool_result').length, 1, 'answered once');
  },

  'a re-send whose run the log never shows appears after the grace; a late run_started still puts the message first'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push({ type: 'approval_required', session_id: 's1', run_id: 'run1', approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 't' });
    h.advance(1000);
    assert.equal(h.cards('approval').length, 0, 'still within the grace');
    h.advance(1000);
    assert.equal(h.cards('approval').length, 1, 'shown once the log stayed quiet');
    assert.equal(h.card('ap1').approval.state, 'pending');
    assert.equal(h.events.controls.busy, true);
    // A very late replay: the message goes above the run's card and bubble.
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'pay' } }));
    assert.deepEqual(h.msgs(), [['user', 'pay', 'sent'], ['assistant', '', 'running']]);
    const user = h.chat.items[0];
    assert.equal(user.role, 'user');
    const placed = h.events.order.find(([id]) => id === user.id);
    assert.equal(placed[1], h.card('ap1').id, 'the view puts it in front of the run\'s first item');
  },

  'the grace is counted from the last replayed event'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push({ type: 'approval_required', session_id: 's1', run_id: 'run9', approval_id: 'ap9', tool_call_id: 'tc9', tool_name: 't' });
    for (let i = 1; i <= 4; i++) {
      h.advance(1000);
      s.push(ev(2 * i - 1, 'run_started', { run_id: 'old' + i, message: { role: 'user', content: 'm' + i } }));
      s.push(ev(2 * i, 'done', { run_id: 'old' + i }));
    }
    assert.equal(h.cards('approval').length, 0, 'the replay is still coming in');
    assert.equal(h.msgs().length, 8);
    h.advance(1000);
    h.advance(1000);
    assert.equal(h.cards('approval').length, 1);
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

  'an agent state named like the platform\'s (source agent) neither ends nor pauses the run'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'state', { state: 'CANCELLED', detail: {}, source: 'agent' }));
    s.push(ev(3, 'state', { state: 'PAUSED_WAITING_APPROVAL', detail: {}, source: 'agent' }));
    s.push(ev(4, 'delta', { text: 'still here' }));
    assert.equal(h.chat.snapshot().messages[1].status, 'running');
    assert.equal(h.chat.snapshot().activeRunId, 'run1');
    s.push(ev(5, 'state', { state: 'CANCELLED', detail: {}, source: 'platform' }));
    assert.equal(h.chat.snapshot().activeRunId, null);
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

  // Issue 9: each sub-agent call is a card — agent, input, streaming partials, the child's own
  // approval inside it, its answer and how long it took.
  'sub-agent cards: partials, a nested approval, the answer and its duration'() {
    const h = harness();
    const s = h.connect();
    h.chat.send('Plan my trip: weather in Paris, then send 250 to Bob');
    s.push(ev(1, 'run_started', { request_id: s.last().request_id, agent_id: 'planner', message: { role: 'user', content: 'Plan my trip' } }));
    const child = (seq, type, run, fields) => ev(seq, type, Object.assign({ run_id: run, parent_run_id: 'run1' }, fields));
    s.push(child(2, 'sub_agent_call_start', 'w1', { agent_id: 'weather', input_summary: 'weather in Paris', depth: 1, tool_call_id: 'tc0' }));
    s.push(child(3, 'state', 'w1', { state: 'thinking', source: 'agent', detail: {} }));
    s.push(child(4, 'sub_agent_partial', 'w1', { text: 'Sunny ' }));
    s.push(child(5, 'sub_agent_partial', 'w1', { text: 'in Paris' }));
    const w = h.cards('subagent')[0];
    assert.equal(w.containerId, null, 'a child of the root is a top-level card');
    assert.deepEqual([w.agentId, w.sub.input, w.text, w.status, w.statusText], ['weather', 'weather in Paris', 'Sunny in Paris', 'running', 'thinking']);
    s.push(child(6, 'sub_agent_complete', 'w1', { agent_id: 'weather', output: 'Sunny in Paris.', usage: { total_tokens: 9 }, duration_ms: 1234 }));
    assert.deepEqual([w.text, w.status, w.statusText], ['Sunny in Paris.', 'done', 'done · 9 tokens · 1.2 s']);

    s.push(child(7, 'sub_agent_call_start', 'p1', { agent_id: 'payments', input_summary: 'send 250 to Bob', depth: 1 }));
    s.push(child(8, 'approval_required', 'p1', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 'demo.transfer', args_summary: '{"amount":250}', expires_at: h.clock.t + 60000 }));
    s.push(child(9, 'state', 'p1', { state: 'PAUSED_WAITING_APPROVAL', source: 'platform', detail: { tool_call_id: 'tc1', approval_id: 'ap1', outcome: 'WAITING_APPROVAL' } }));
    const p = h.cards('subagent')[1];
    const ap = h.card('ap1');
    assert.equal(ap.containerId, p.id, 'the child\'s approval goes inside its card');
    assert.equal(ap.runId, 'p1');
    assert.equal(p.statusText, 'waiting for your approval');
    assert.equal(h.events.controls.runStatus, 'waiting for your approval', 'the header says what the child waits for');
    assert.equal(h.events.controls.runPhase, 'waiting_approval');
    assert.equal(h.chat.decideApproval(ap, 'approve', 'ok'), true);
    const d = s.last();
    assert.deepEqual([d.type, d.run_id, d.approval_id, d.decision], ['approval_decision', 'p1', 'ap1', 'approve']);
    s.push(child(10, 'state', 'p1', { state: 'RUNNING', source: 'platform', detail: { tool_call_id: 'tc1', approval_id: 'ap1', outcome: 'DISPATCHED' } }));
    assert.equal(ap.approval.state, 'approved');
    assert.equal(h.events.controls.runStatus, 'running…');
    s.push(child(11, 'sub_agent_partial', 'p1', { text: 'sent' }));
    s.push(child(12, 'sub_agent_complete', 'p1', { output: 'sent', usage: {}, duration_ms: 65000 }));
    assert.equal(p.statusText, 'done · 1 min 5 s');
    s.push(ev(13, 'delta', { text: 'Both done.' }));
    s.push(ev(14, 'done', {}));
    assert.deepEqual(h.msgs(), [['user', 'Plan my trip: weather in Paris, then send 250 to Bob', 'sent'], ['assistant', 'Both done.', 'done']],
      'cards are not messages');
    assert.deepEqual(h.chat.snapshot().subAgents.map((b) => [b.runId, b.parentRunId, b.agentId, b.state, b.output, b.durationMs]),
      [['w1', 'run1', 'weather', 'done', 'Sunny in Paris.', 1234], ['p1', 'run1', 'payments', 'done', 'sent', 65000]]);
    assert.equal(h.chat.snapshot().activeRunId, null, 'children never hold the session');
  },

  'nested sub-agents: a grandchild and its client tool go inside their caller\'s card; errors end the cards'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'go' } }));
    s.push(ev(2, 'sub_agent_call_start', { run_id: 'b', parent_run_id: 'run1', agent_id: 'b', input_summary: 'x' }));
    s.push(ev(3, 'sub_agent_call_start', { run_id: 'c', parent_run_id: 'b', agent_id: 'c', input_summary: 'y', depth: 2 }));
    s.push(ev(4, 'tool_request', { run_id: 'c', parent_run_id: 'b', tool_call_id: 'tc1', tool_name: 'client.now', args: {}, deadline_ts: h.clock.t + 15000 }));
    const [b, c] = h.cards('subagent');
    assert.equal(c.containerId, b.id);
    assert.equal(h.card('tc1').containerId, c.id);
    assert.equal(s.ofType('tool_result').length, 1, 'the page runs a child\'s client tool like a root\'s');
    assert.equal(s.last().run_id, 'c');
    s.push(ev(5, 'sub_agent_error', { run_id: 'c', parent_run_id: 'b', agent_id: 'c', code: 'boom', message: 'told to fail', duration_ms: 20 }));
    assert.deepEqual([c.status, c.statusText, c.error.code], ['failed', 'failed — boom: told to fail · 20 ms', 'boom']);
    s.push(ev(6, 'sub_agent_error', { run_id: 'b', parent_run_id: 'run1', agent_id: 'b', code: 'parent_ended', message: '', duration_ms: 30 }));
    assert.deepEqual([b.status, b.statusText], ['cancelled', 'stopped — its caller ended · 30 ms']);
    // A platform CANCELLED state of a child settles its card; the error then adds the duration.
    s.push(ev(7, 'sub_agent_call_start', { run_id: 'd', parent_run_id: 'run1', agent_id: 'd' }));
    s.push(ev(8, 'state', { run_id: 'd', parent_run_id: 'run1', state: 'CANCELLED', source: 'platform', detail: { reason: 'x' } }));
    const dcard = h.cards('subagent')[2];
    assert.equal(dcard.status, 'cancelled');
    s.push(ev(9, 'sub_agent_error', { run_id: 'd', parent_run_id: 'run1', code: 'cancelled', duration_ms: 5 }));
    assert.equal(dcard.statusText, 'cancelled · 5 ms');
    assert.equal(h.chat.snapshot().activeRunId, 'run1');
  },

  'reload rebuilds sub-agent cards from the log; a pending approval of a child is re-sent once'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    const req = { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 'demo.transfer', args_summary: '{}', expires_at: h.clock.t + 300000 };
    // The re-send may come before the replay reaches the child: it waits for it.
    s.push(Object.assign({ type: 'approval_required', session_id: 's1', run_id: 'p1', parent_run_id: 'run1' }, req));
    assert.equal(h.cards('approval').length, 0);
    s.push(ev(1, 'run_started', { agent_id: 'planner', message: { role: 'user', content: 'plan' } }));
    s.push(ev(2, 'sub_agent_call_start', { run_id: 'p1', parent_run_id: 'run1', agent_id: 'payments', input_summary: 'send 250' }));
    s.push(ev(3, 'sub_agent_partial', { run_id: 'p1', parent_run_id: 'run1', text: 'waiting…' }));
    s.push(ev(4, 'approval_required', Object.assign({ run_id: 'p1', parent_run_id: 'run1' }, req)));
    h.advance(5000);
    assert.equal(h.cards('approval').length, 1);
    const p = h.cards('subagent')[0];
    assert.equal(h.card('ap1').containerId, p.id);
    assert.equal(h.card('ap1').approval.state, 'pending');
    assert.equal(p.text, 'waiting…');
    // Another subscribe (a reconnect) re-sends it again: the same card.
    s.drop();
    h.advance(500); // the reconnect backoff
    const s2 = h.connect();
    assert.deepEqual(s2.ofType('subscribe').map((m) => m.after_seq), [4]);
    s2.push(Object.assign({ type: 'approval_required', session_id: 's1', run_id: 'p1', parent_run_id: 'run1' }, req));
    assert.equal(h.cards('approval').length, 1);
    assert.deepEqual(h.chat.items.map((i) => i.role + (i.kind ? ':' + i.kind : '')), ['user', 'assistant', 'notice:subagent', 'notice:approval']);
  },

  'client.now: local wall-clock time with offset, zone and locale'() {
    const t = 1700000000000; // 2023-11-14T22:13:20Z
    assert.deepEqual(clientNow(t, { timeZone: 'Europe/Paris', locale: 'fr-FR', offsetMinutes: 60 }), {
      iso: '2023-11-14T23:13:20.000+01:00', epoch_ms: t, time_zone: 'Europe/Paris', utc_offset_minutes: 60, locale: 'fr-FR',
    });
    assert.equal(clientNow(t + 7, { offsetMinutes: -330 }).iso, '2023-11-14T16:43:20.007-05:30');
    assert.equal(clientNow(t, { offsetMinutes: 0 }).iso, '2023-11-14T22:13:20.000Z');
    // Without overrides: what the runtime says, and an iso that names the same instant.
    const r = clientNow(t);
    assert.deepEqual(Object.keys(r).sort(), ['epoch_ms', 'iso', 'locale', 'time_zone', 'utc_offset_minutes']);
    assert.equal(new Date(r.iso).getTime(), t);
    assert.equal(r.utc_offset_minutes, -new Date(t).getTimezoneOffset());
    assert.equal(r.time_zone, Intl.DateTimeFormat().resolvedOptions().timeZone);
    assert.ok(typeof r.locale === 'string' && r.locale !== '');
  },

  'timeMs reads epoch ms and RFC 3339; zero means none'() {
    assert.equal(timeMs(1700000000000), 1700000000000);
    assert.equal(timeMs('1700000000000'), 1700000000000);
    assert.equal(timeMs('2023-11-14T22:13:20Z'), 1700000000000);
    assert.deepEqual([timeMs(0), timeMs(null), timeMs(''), timeMs('soon'), timeMs({})], [null, null, null, null, null]);
  },

  'client.now request: run at once, answered once, re-sent after a reconnect, settled by state'() {
    const h = harness({ sessionId: 's1' });
    let s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'What time is it?' } }));
    s.push(ev(2, 'state', { state: 'PAUSED_WAITING_TOOL', detail: { tool_call_id: 'tc1', tool_name: 'client.now' } }));
    assert.equal(h.chat.snapshot().runPhase, 'waiting_tool');
    assert.equal(h.events.controls.runStatus, 'waiting for this browser');
    assert.equal(h.chat.snapshot().messages[1].detail, 'waiting for this browser');

    s.push(ev(3, 'tool_request', { tool_call_id: 'tc1', tool_name: 'client.now', args: {}, deadline_ts: h.clock.t + 30000 }));
    const results = s.ofType('tool_result');
    assert.equal(results.length, 1);
    const r = results[0];
    assert.match(r.request_id, /^r-/);
    assert.deepEqual(r, {
      type: 'tool_result', run_id: 'run1', tool_call_id: 'tc1', ok: true, request_id: r.request_id, ts: h.clock.t,
      result: { iso: '2023-11-14T23:13:20.000+01:00', epoch_ms: 1700000000000, time_zone: 'Europe/Paris', utc_offset_minutes: 60, locale: 'fr-FR' },
    });
    const card = h.card('tc1');
    assert.equal(card.tool.state, 'sent');
    assert.equal(card.text, 'The agent asks this browser to run “client.now”');
    assert.equal(h.chat.snapshot().messages.length, 2, 'cards are not messages');
    assert.deepEqual(h.chat.snapshot().tools.map((t) => [t.toolCallId, t.state, t.ok]), [['tc1', 'sent', true]]);

    // After the subscribe the server sends the pending request again, without seq: one card,
    // and no second answer on the same connection.
    s.push({ type: 'tool_request', session_id: 's1', run_id: 'run1', tool_call_id: 'tc1', tool_name: 'client.now', args: {}, deadline_ts: h.clock.t + 30000 });
    assert.equal(h.cards('tool').length, 1);
    assert.equal(s.ofType('tool_result').length, 1);
    assert.equal(h.chat.snapshot().lastSeq, 3);

    // The answer may have been lost with the connection: the re-sent request gets it again.
    s.drop();
    h.advance(500);
    s = h.connect();
    assert.equal(s.ofType('subscribe')[0].after_seq, 3);
    s.push({ type: 'tool_request', session_id: 's1', run_id: 'run1', tool_call_id: 'tc1', tool_name: 'client.now', args: {}, deadline_ts: h.clock.t + 29000 });
    assert.equal(s.ofType('tool_result').length, 1);
    assert.deepEqual(s.ofType('tool_result')[0].result, r.result, 'the same answer, not a new reading');
    assert.notEqual(s.ofType('tool_result')[0].request_id, r.request_id);
    assert.equal(h.cards('tool').length, 1);

    s.push(ev(4, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc1', tool_name: 'client.now', outcome: 'SUCCEEDED' } }));
    assert.equal(h.card('tc1').tool.state, 'done');
    assert.equal(h.chat.snapshot().runPhase, 'running');
    assert.equal(h.events.controls.runStatus, 'running…');
    // A late refusal of the duplicate answer changes nothing.
    s.push({ type: 'error', request_id: s.ofType('tool_result')[0].request_id, code: 'conflict', message: 'already answered' });
    assert.equal(h.card('tc1').tool.state, 'done');
    assert.equal(h.events.toasts.length, 0);

    s.push(ev(5, 'delta', { text: 'It is 23:13.' }));
    s.push(ev(6, 'done', {}));
    assert.equal(h.events.controls.runStatus, '');
    assert.equal(h.chat.snapshot().runPhase, '');
    assert.equal(h.card('tc1').tool.state, 'done', 'run end leaves settled cards alone');
  },

  'unknown client tool: not run; Decline answers unsupported_tool once'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'tool_request', { tool_call_id: 'tc9', tool_name: 'browser.open', args: { url: 'https://example.test/' } }));
    const card = h.card('tc9');
    assert.equal(card.tool.supported, false);
    assert.equal(card.tool.state, 'waiting');
    assert.equal(card.tool.argsText, '{"url":"https://example.test/"}');
    assert.equal(s.ofType('tool_result').length, 0, 'nothing answered by itself');
    assert.equal(h.chat.declineTool(card), true);
    const r = s.last();
    assert.deepEqual(r, {
      type: 'tool_result', run_id: 'run1', tool_call_id: 'tc9', ok: false, request_id: r.request_id, ts: h.clock.t,
      error: { code: 'unsupported_tool', message: 'this browser has no client tool named “browser.open”' },
    });
    assert.equal(h.card('tc9').tool.state, 'sent');
    assert.equal(h.card('tc9').statusText, 'declined');
    assert.equal(h.chat.declineTool(h.card('tc9')), false);
    assert.equal(s.ofType('tool_result').length, 1);
    s.push(ev(3, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc9', outcome: 'FAILED' } }));
    assert.equal(h.card('tc9').tool.state, 'failed');
    assert.equal(h.card('tc9').statusText, 'declined');
  },

  'client tool request past its deadline: shown expired, never answered'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'tool_request', { tool_call_id: 'old', tool_name: 'client.now', args: {}, deadline_ts: h.clock.t - 1 }));
    assert.equal(h.card('old').tool.state, 'expired');
    assert.equal(s.ofType('tool_result').length, 0);
    // A pending unknown tool expires on the clock; Decline is then refused.
    s.push(ev(3, 'tool_request', { tool_call_id: 'tc2', tool_name: 'nope', deadline_ts: new Date(h.clock.t + 10000).toISOString() }));
    assert.equal(h.card('tc2').tool.state, 'waiting');
    h.advance(5000);
    assert.equal(h.card('tc2').tool.state, 'waiting');
    h.advance(5100);
    assert.equal(h.card('tc2').tool.state, 'expired');
    assert.equal(h.chat.declineTool(h.card('tc2')), false);
    assert.equal(s.ofType('tool_result').length, 0);
    // The server's TIMEOUT outcome names it.
    s.push(ev(4, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc2', outcome: 'TIMEOUT' } }));
    assert.equal(h.card('tc2').statusText, 'timed out');
  },

  'client tool that returns a promise, or throws'() {
    return (async () => {
      let resolve;
      const h = harness({
        sessionId: 's1',
        clientTools: {
          'client.slow': () => new Promise((r) => { resolve = r; }),
          'client.broken': () => { throw new Error('no camera'); },
        },
      });
      const s = h.connect();
      s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
      s.push(ev(2, 'tool_request', { tool_call_id: 'a', tool_name: 'client.slow', args: { n: 1 } }));
      assert.equal(h.card('a').tool.state, 'running');
      assert.equal(s.ofType('tool_result').length, 0);
      resolve({ v: 42 });
      await new Promise((r) => setImmediate(r));
      assert.deepEqual(s.ofType('tool_result').map((m) => [m.tool_call_id, m.ok, m.result]), [['a', true, { v: 42 }]]);
      s.push(ev(3, 'tool_request', { tool_call_id: 'b', tool_name: 'client.broken' }));
      const r = s.last();
      assert.deepEqual([r.tool_call_id, r.ok, r.error], ['b', false, { code: 'tool_error', message: 'no camera' }]);
      // client.now is not offered when the page is given its own tools.
      s.push(ev(4, 'tool_request', { tool_call_id: 'c', tool_name: 'client.now' }));
      assert.equal(h.card('c').tool.state, 'waiting');
    })();
  },

  'tool result refused by the server shows on the card'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'tool_request', { tool_call_id: 'tc1', tool_name: 'client.now' }));
    s.push({ type: 'error', request_id: s.last().request_id, code: 'tool_call_not_pending', message: 'timed out' });
    assert.equal(h.card('tc1').tool.state, 'refused');
    assert.equal(h.card('tc1').statusText, 'result refused — tool_call_not_pending: timed out');
    assert.equal(h.chat.snapshot().connected, true);
  },

  'approval: dedupe by approval_id, reason, decision shape, outcome from state'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'Send 250 to Bob' } }));
    const req = { approval_id: 'ap1', tool_call_id: 'tc5', tool_name: 'demo.transfer', args_summary: 'transfer 250 to Bob', expires_at: h.clock.t + 600000 };
    s.push(ev(2, 'approval_required', req));
    s.push(ev(3, 'state', { state: 'PAUSED_WAITING_APPROVAL', detail: { tool_call_id: 'tc5', tool_name: 'demo.transfer', approval_id: 'ap1', outcome: 'WAITING_APPROVAL' } }));
    s.push(Object.assign({ type: 'approval_required', session_id: 's1', run_id: 'run1' }, req)); // the re-send, no seq
    assert.equal(h.cards('approval').length, 1);
    const card = h.card('ap1');
    assert.equal(card.text, 'Approval needed for “demo.transfer”: transfer 250 to Bob');
    assert.equal(card.approval.open, true);
    assert.equal(card.approval.expiresMs, h.clock.t + 600000);
    assert.equal(h.chat.snapshot().runPhase, 'waiting_approval');
    assert.equal(h.events.controls.runStatus, 'waiting for your approval');
    assert.equal(h.chat.snapshot().messages[1].detail, 'waiting for your approval');

    assert.equal(h.chat.decideApproval(card, 'maybe'), false);
    assert.equal(h.chat.decideApproval(card, 'approve', '  looks right '), true);
    const d = s.last();
    assert.deepEqual(d, {
      type: 'approval_decision', run_id: 'run1', approval_id: 'ap1', decision: 'approve', reason: 'looks right',
      request_id: d.request_id, ts: h.clock.t,
    });
    assert.match(d.request_id, /^r-/);
    assert.equal(card.approval.open, false, 'buttons off once sent');
    assert.equal(card.statusText, 'approving…');
    assert.equal(h.chat.decideApproval(card, 'reject'), false);
    assert.equal(s.ofType('approval_decision').length, 1);
    // The re-send on the same connection does not send the decision again.
    s.push(Object.assign({ type: 'approval_required', session_id: 's1', run_id: 'run1' }, req));
    assert.equal(s.ofType('approval_decision').length, 1);

    s.push(ev(4, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc5', tool_name: 'demo.transfer', approval_id: 'ap1', outcome: 'DISPATCHED' } }));
    assert.equal(card.approval.state, 'approved');
    assert.equal(card.statusText, 'approved — looks right');
    assert.equal(h.chat.snapshot().runPhase, 'running');
    assert.deepEqual(h.chat.snapshot().approvals.map((a) => [a.approvalId, a.state, a.decision]), [['ap1', 'approved', 'approve']]);
    // Later states of the same tool call do not touch the approval.
    s.push(ev(5, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc5', outcome: 'SUCCEEDED' } }));
    assert.equal(card.approval.state, 'approved');
  },

  'approval outcomes: rejected, expired, cancelled; decided elsewhere'() {
    for (const [outcome, state, text] of [['REJECTED', 'rejected', 'rejected'], ['EXPIRED', 'expired', 'expired'], ['CANCELLED', 'cancelled', 'cancelled']]) {
      const h = harness({ sessionId: 's1' });
      const s = h.connect();
      s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
      s.push(ev(2, 'approval_required', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 't' }));
      s.push(ev(3, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc1', approval_id: 'ap1', outcome } }));
      const card = h.card('ap1');
      assert.equal(card.approval.state, state, outcome);
      assert.equal(card.statusText, text);
      assert.equal(h.chat.decideApproval(card, 'approve'), false);
      assert.equal(s.ofType('approval_decision').length, 0);
    }
    // Our own rejection, with its reason.
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'approval_required', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 't' }));
    assert.equal(h.chat.decideApproval(h.card('ap1'), 'reject', 'wrong account'), true);
    assert.deepEqual([s.last().decision, s.last().reason], ['reject', 'wrong account']);
    assert.equal(h.card('ap1').statusText, 'rejecting…');
    s.push(ev(3, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc1', approval_id: 'ap1', outcome: 'REJECTED' } }));
    assert.equal(h.card('ap1').statusText, 'rejected — wrong account');
  },

  'approval already decided: the conflict reply shows, nothing re-enabled'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'approval_required', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 't' }));
    const card = h.card('ap1');
    h.chat.decideApproval(card, 'approve');
    s.push({ type: 'error', request_id: s.last().request_id, code: 'approval_conflict', message: 'the approval was already decided: rejected' });
    assert.equal(card.approval.state, 'refused');
    assert.equal(card.approval.open, false);
    assert.equal(card.statusText, 'the approval was already decided: rejected');
    assert.equal(h.events.toasts.length, 0);
    assert.equal(h.chat.decideApproval(card, 'reject'), false);
    s.push(ev(3, 'approval_required', { approval_id: 'apx', tool_call_id: 'tcx', tool_name: 't' }));
    h.chat.decideApproval(h.card('apx'), 'reject');
    s.push({ type: 'error', request_id: s.last().request_id, code: 'conflict', message: 'approved by bob' });
    assert.equal(h.card('apx').statusText, 'already decided: approved by bob');
    // Another refusal is worth a toast, and still re-enables nothing.
    s.push(ev(4, 'approval_required', { approval_id: 'ap2', tool_call_id: 'tc2', tool_name: 't' }));
    h.chat.decideApproval(h.card('ap2'), 'approve');
    s.push({ type: 'error', request_id: s.last().request_id, code: 'forbidden', message: 'not your approval' });
    assert.equal(h.card('ap2').statusText, 'decision refused — forbidden: not your approval');
    assert.equal(h.card('ap2').approval.open, false);
    assert.equal(h.events.toasts.length, 1);
    // Too late: the card shows it expired.
    s.push(ev(5, 'approval_required', { approval_id: 'ap3', tool_call_id: 'tc3', tool_name: 't' }));
    h.chat.decideApproval(h.card('ap3'), 'approve');
    s.push({ type: 'error', request_id: s.last().request_id, code: 'approval_expired', message: 'the approval expired before this decision' });
    assert.equal(h.card('ap3').statusText, 'expired');
    assert.equal(h.events.toasts.length, 1);
    // The server's outcome still settles a refused card.
    s.push(ev(6, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc1', approval_id: 'ap1', outcome: 'REJECTED' } }));
    assert.equal(card.statusText, 'rejected');
  },

  'approved client tool: the pause for the browser settles the approval'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'approval_required', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 'client.now' }));
    s.push(ev(3, 'state', { state: 'PAUSED_WAITING_APPROVAL', detail: { tool_call_id: 'tc1', tool_name: 'client.now', approval_id: 'ap1', outcome: 'WAITING_APPROVAL' } }));
    assert.equal(h.card('ap1').approval.state, 'pending');
    h.chat.decideApproval(h.card('ap1'), 'approve');
    s.push(ev(4, 'state', { state: 'PAUSED_WAITING_TOOL', detail: { tool_call_id: 'tc1', tool_name: 'client.now', approval_id: 'ap1', outcome: 'DISPATCHED' } }));
    assert.equal(h.card('ap1').approval.state, 'approved');
    assert.equal(h.events.controls.runStatus, 'waiting for this browser');
    s.push(ev(5, 'tool_request', { tool_call_id: 'tc1', tool_name: 'client.now' }));
    assert.equal(s.ofType('tool_result').length, 1);
    s.push(ev(6, 'state', { state: 'RUNNING', detail: { tool_call_id: 'tc1', tool_name: 'client.now', approval_id: 'ap1', outcome: 'SUCCEEDED' } }));
    assert.equal(h.card('tc1').tool.state, 'done');
    assert.equal(h.card('ap1').approval.state, 'approved');
  },

  'approval decision sent again after a reconnect if still pending'() {
    const h = harness({ sessionId: 's1' });
    let s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    const req = { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 't' };
    s.push(ev(2, 'approval_required', req));
    h.chat.decideApproval(h.card('ap1'), 'approve', 'ok');
    s.drop();
    assert.equal(h.chat.decideApproval(h.card('ap1'), 'approve'), false);
    h.advance(500);
    s = h.connect();
    s.push(Object.assign({ type: 'approval_required', session_id: 's1', run_id: 'run1' }, req));
    assert.deepEqual(s.ofType('approval_decision').map((m) => [m.approval_id, m.decision, m.reason]), [['ap1', 'approve', 'ok']]);
    assert.equal(h.cards('approval').length, 1);
  },

  'approval expires on the clock; offline decide sends nothing'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'approval_required', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 't', expires_at: new Date(h.clock.t + 60000).toISOString() }));
    s.push(ev(3, 'approval_required', { approval_id: 'late', tool_call_id: 'tc2', tool_name: 't', expires_at: h.clock.t - 5 }));
    assert.equal(h.card('late').approval.state, 'expired');
    h.advance(60100);
    assert.equal(h.card('ap1').approval.state, 'expired');
    assert.equal(h.card('ap1').approval.open, false);
    assert.equal(h.chat.decideApproval(h.card('ap1'), 'approve'), false);
    assert.equal(s.ofType('approval_decision').length, 0);
  },

  'run end closes open cards; a server tool wait names the tool'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'state', { state: 'PAUSED_WAITING_TOOL', detail: { tool_call_id: 'w1', tool_name: 'demo.weather' } }));
    assert.equal(h.events.controls.runStatus, 'waiting for the tool “demo.weather”');
    s.push(ev(3, 'state', { state: 'RUNNING', detail: { tool_call_id: 'w1', tool_name: 'demo.weather', outcome: 'SUCCEEDED' } }));
    s.push(ev(4, 'approval_required', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 't' }));
    s.push(ev(5, 'tool_request', { tool_call_id: 'tc2', tool_name: 'nope' }));
    s.push(ev(6, 'state', { state: 'thinking' }));
    assert.equal(h.card('ap1').approval.open, true, "an agent's own state closes nothing");
    s.push(ev(7, 'error', { code: 'agent_disconnected', message: 'gone' }));
    assert.equal(h.card('ap1').approval.state, 'closed');
    assert.equal(h.card('ap1').statusText, 'no longer pending');
    assert.equal(h.card('tc2').tool.state, 'closed');
    assert.equal(h.chat.declineTool(h.card('tc2')), false);
    assert.equal(h.events.controls.runStatus, '');
    // Replayed requests of a finished run are shown closed and not answered.
    s.push(ev(8, 'tool_request', { tool_call_id: 'tc3', tool_name: 'client.now' }));
    assert.equal(h.card('tc3').tool.state, 'closed');
    assert.equal(s.ofType('tool_result').length, 0);
  },

  "the agent's own states: words on the bubble, never over the platform's pause"() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'x' } }));
    s.push(ev(2, 'state', { state: 'calling_tool', detail: { tool: 'demo.transfer', args: { amount: 250 } } }));
    assert.equal(h.chat.snapshot().messages[1].detail, 'calling tool');
    assert.equal(h.events.controls.runStatus, 'running…');
    s.push(ev(3, 'approval_required', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 'demo.transfer' }));
    s.push(ev(4, 'state', { state: 'PAUSED_WAITING_APPROVAL', detail: { tool_call_id: 'tc1', approval_id: 'ap1' } }));
    s.push(ev(5, 'state', { state: 'waiting_for_tool', detail: { tool_call_id: 'tc1', approval_id: 'ap1', state: 'WAITING_APPROVAL' } }));
    assert.equal(h.chat.snapshot().messages[1].detail, 'waiting for your approval');
    assert.equal(h.events.controls.runStatus, 'waiting for your approval');
    assert.equal(h.card('ap1').approval.state, 'pending', 'an agent state without outcome settles nothing');
  },

  'new session forgets the cards'() {
    const h = harness();
    const s = h.connect();
    h.chat.send('hi');
    s.push(ev(2, 'run_started', { request_id: s.last().request_id, message: { role: 'user', content: 'hi' } }));
    s.push(ev(3, 'approval_required', { approval_id: 'ap1', tool_call_id: 'tc1', tool_name: 't' }));
    h.chat.newSession();
    assert.equal(h.chat.approvalCards.size, 0);
    assert.deepEqual(h.chat.snapshot().approvals, []);
  },

  'input required: the question on the bubble, the next message answers it, a new topic does not'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    h.chat.send('weather please');
    s.push(ev(1, 'run_started', { request_id: s.last().request_id, message: { role: 'user', content: 'weather please' }, intention_id: 'int1' }));
    s.push(ev(2, 'delta', { text: 'Let me check. ' }));
    s.push(ev(3, 'input_required', { question: 'Which city?' }));
    assert.deepEqual(h.msgs()[1], ['assistant', 'Let me check.\n\nWhich city?', 'input_required']);
    assert.equal(h.chat.snapshot().messages[1].question, 'Which city?');
    assert.equal(h.chat.snapshot().asking, 'Which city?');
    assert.equal(h.events.controls.asking, 'Which city?');
    assert.equal(h.events.controls.canSend, true, 'the session is free: the answer can be sent');
    assert.equal(h.events.controls.canCancel, false);
    // The answer is an ordinary message of the same intention: no new_intention.
    h.chat.send('Paris');
    assert.equal(s.last().type, 'agent_invoke');
    assert.equal(s.last().new_intention, undefined);
    s.push(ev(4, 'run_started', { run_id: 'run2', request_id: s.last().request_id, message: { role: 'user', content: 'Paris' }, resumes_run_id: 'run1' }));
    assert.equal(h.chat.snapshot().messages[1].detail, 'answered');
    assert.equal(h.chat.snapshot().asking, '');
    s.push(ev(5, 'delta', { run_id: 'run2', text: 'Sunny.' }));
    s.push(ev(6, 'input_required', { run_id: 'run2', question: 'Anything else?' }));
    // New topic: the question is left, the message says new_intention.
    h.chat.send('Send 250 to Bob', { newIntention: true });
    assert.equal(s.last().new_intention, true);
    s.push(ev(7, 'run_started', { run_id: 'run3', request_id: s.last().request_id, message: { role: 'user', content: 'Send 250 to Bob' } }));
    const run2 = h.chat.snapshot().messages.find((m) => m.runId === 'run2' && m.role === 'assistant');
    assert.equal(run2.detail, 'left unanswered — a new topic started');
    assert.equal(run2.status, 'input_required');
  },

  'input required is rebuilt on reload, and a child that asks back settles its card'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    assert.deepEqual(s.last(), { type: 'subscribe', ts: h.clock.t, session_id: 's1', after_seq: 0, request_id: s.last().request_id });
    s.push(ev(1, 'run_started', { message: { role: 'user', content: 'plan' } }));
    s.push(ev(2, 'sub_agent_call_start', { run_id: 'c1', parent_run_id: 'run1', agent_id: 'weather', input_summary: 'weather?' }));
    s.push(ev(3, 'sub_agent_complete', { run_id: 'c1', parent_run_id: 'run1', agent_id: 'weather', status: 'input_required', question: 'Which city?', output: '', usage: {}, duration_ms: 12 }));
    // A child's own input_required never reaches a client, but one must not end the root.
    s.push(ev(4, 'input_required', { run_id: 'c1', parent_run_id: 'run1', question: 'Which city?' }));
    const sub = h.chat.snapshot().subAgents[0];
    assert.equal(sub.state, 'asked');
    assert.equal(sub.question, 'Which city?');
    assert.equal(sub.text, 'Which city?');
    assert.match(sub.detail, /^asked back/);
    assert.equal(h.chat.snapshot().messages[1].status, 'running');
    s.push(ev(5, 'input_required', { question: 'Which city should I check?' }));
    assert.deepEqual(h.msgs()[1], ['assistant', 'Which city should I check?', 'input_required']);
    assert.equal(h.events.controls.asking, 'Which city should I check?');
    // New session forgets the question.
    h.chat.newSession();
    assert.equal(h.events.controls.asking, '');
  },

  // --- a new session's first message whose run_started never reached the page ---

  'a new session\'s first message is kept until its run_started, then settled'() {
    const h = harness();
    const s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    assert.deepEqual(h.events.pendingNew, [['pending', { requestId: rid, user: 'demo', agent: 'demo', sentAt: h.clock.t, text: 'hi' }]]);
    s.push(ev(2, 'run_started', { request_id: rid, message: { role: 'user', content: 'hi' } }));
    assert.deepEqual(h.events.pendingNew.slice(1), [['settled', rid]]);
    // A message in a known session creates none: nothing to keep.
    s.push(ev(3, 'done', {}));
    h.chat.send('more');
    assert.equal(h.events.pendingNew.length, 2);
  },

  'an error reply settles the kept message'() {
    const h = harness();
    const s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    s.push({ type: 'error', request_id: rid, code: 'agent_not_found', message: 'no agent demo' });
    assert.deepEqual(h.events.pendingNew.map((x) => x[0]), ['pending', 'settled']);
    assert.equal(h.chat.snapshot().recovering, false);
  },

  async 'reload before run_started: the session is found over HTTP and resumed from seq 0'() {
    const api = new FakeAPI();
    api.add('s-other', 'r-someone-else'); // older
    api.add('s1', 'r-mine');
    api.add('s-newer', 'r-another-tab'); // newest: listed first
    const h = harness({ fetch: api.fetch, pendingNewSession: { requestId: 'r-mine', user: 'demo', agent: 'demo', sentAt: 1700000000000 - 800 } });
    const s = h.connect();
    assert.equal(h.events.controls.canSend, false, 'no new conversation while the last one is looked for');
    assert.equal(h.events.controls.busy, true);
    assert.match(h.events.controls.runStatus, /looking for the conversation/);
    assert.equal(s.ofType('subscribe').length, 0);
    await settle();
    assert.deepEqual(api.paths(), [
      '/v1/sessions?user_id=demo&agent_id=demo&limit=10',
      '/v1/sessions/s-newer/events?after_seq=0&limit=10',
      '/v1/sessions/s1/events?after_seq=0&limit=10',
    ]);
    assert.deepEqual(api.calls[0][1], { headers: { Authorization: 'Bearer KEY' }, cache: 'no-store' });
    assert.deepEqual(h.events.sessions, ['s1'], 'the session is remembered');
    assert.deepEqual(h.events.pendingNew, [['settled', 'r-mine']]);
    assert.deepEqual(s.ofType('subscribe').map((m) => [m.session_id, m.after_seq]), [['s1', 0]]);
    s.push(ev(2, 'run_started', { request_id: 'r-mine', message: { role: 'user', content: 'hi' } }));
    s.push(ev(3, 'delta', { text: 'hello' }));
    assert.equal(h.events.controls.canSend, false, 'the run goes on');
    s.push(ev(5, 'done', {}));
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', 'hello', 'done']]);
    assert.equal(h.events.controls.canSend, true);
    assert.equal(h.chat.snapshot().recovering, false);
  },

  async 'reload before the server committed the session: looked for again until it appears'() {
    const api = new FakeAPI();
    api.add('s-old', 'r-older');
    const h = harness({ fetch: api.fetch, pendingNewSession: { requestId: 'r-mine', user: 'demo', agent: 'demo', sentAt: 1700000000000 - 100 } });
    const s = h.connect();
    await settle();
    assert.deepEqual(api.paths(), ['/v1/sessions?user_id=demo&agent_id=demo&limit=10', '/v1/sessions/s-old/events?after_seq=0&limit=10']);
    assert.deepEqual(h.events.sessions, []);
    h.advance(250);
    await settle();
    // A session found not to be it is not read again: its first run's events came with it.
    assert.deepEqual(api.paths().slice(2), ['/v1/sessions?user_id=demo&agent_id=demo&limit=10']);
    // A queued run: its run_queued carries the request_id before any run_started.
    api.add('s1', 'r-mine', { type: 'run_queued' });
    h.advance(500);
    await settle();
    assert.deepEqual(api.paths().slice(3), ['/v1/sessions?user_id=demo&agent_id=demo&limit=10', '/v1/sessions/s1/events?after_seq=0&limit=10']);
    assert.deepEqual(h.events.sessions, ['s1']);
    assert.deepEqual(s.ofType('subscribe').map((m) => [m.session_id, m.after_seq]), [['s1', 0]]);
    assert.equal(h.timers.filter((t) => t.fn && t.ms === 1000).length, 0, 'no more looking');
  },

  async 'a message the server never got: given up once it could no longer commit it'() {
    const api = new FakeAPI();
    api.add('s-old', 'r-older');
    const sent = 1700000000000 - 2000;
    const h = harness({ fetch: api.fetch, pendingNewSession: { requestId: 'r-lost', user: 'demo', agent: 'demo', sentAt: sent } });
    h.connect();
    await settle();
    for (let i = 0; i < 40 && h.chat.snapshot().recovering; i++) {
      h.advance(2000);
      await settle();
    }
    assert.equal(h.chat.snapshot().recovering, false);
    assert.ok(h.clock.t >= sent + 20000, 'looked for as long as the server could still commit it');
    assert.ok(h.clock.t <= sent + 23000, 'and not much longer');
    assert.deepEqual(h.events.sessions, []);
    assert.deepEqual(h.events.pendingNew, [['settled', 'r-lost']]);
    assert.match(h.events.toasts[0][0], /never reached the server/);
    assert.deepEqual(h.events.drafts, [], 'a record kept by an older page has no text to give back');
    assert.equal(h.events.controls.canSend, true, 'a new conversation can start');
    assert.equal(h.events.controls.runStatus, '');
  },

  async 'a message the server never got, sent before a reload: shown failed and handed back to the message box'() {
    const api = new FakeAPI();
    const sent = 1700000000000 - 2000;
    const h = harness({ fetch: api.fetch, pendingNewSession: { requestId: 'r-lost', user: 'demo', agent: 'demo', sentAt: sent, text: 'hello there' } });
    const s = h.connect();
    await settle();
    for (let i = 0; i < 40 && h.chat.snapshot().recovering; i++) {
      h.advance(2000);
      await settle();
    }
    assert.equal(h.chat.snapshot().recovering, false);
    assert.deepEqual(h.msgs(), [['user', 'hello there', 'failed']]);
    assert.match(h.chat.snapshot().messages[0].detail, /never reached the server/);
    assert.deepEqual(h.events.drafts, ['hello there']);
    assert.deepEqual(h.events.toasts, [], 'the failed bubble says it');
    assert.deepEqual(h.events.pendingNew, [['settled', 'r-lost']]);
    assert.equal(h.events.controls.canSend, true);
    // Sent again, it is a new message with a request_id of its own.
    h.chat.send('hello there');
    assert.equal(s.last().type, 'agent_invoke');
    assert.notEqual(s.last().request_id, 'r-lost');
    assert.equal(h.events.pendingNew[1][1].text, 'hello there', 'kept with its text until answered');
  },

  async 'an old kept message is looked for a few times, then dropped'() {
    const api = new FakeAPI();
    const h = harness({ fetch: api.fetch, pendingNewSession: { requestId: 'r-lost', user: 'demo', agent: 'demo', sentAt: 1700000000000 - 60000 } });
    h.connect();
    await settle();
    h.advance(250);
    await settle();
    h.advance(500);
    await settle();
    assert.equal(api.calls.filter((c) => c[0].startsWith('/v1/sessions?')).length, 3);
    assert.equal(h.chat.snapshot().recovering, false);
    assert.deepEqual(h.events.pendingNew, [['settled', 'r-lost']]);
  },

  async 'stale, foreign or malformed kept messages are dropped without a look'() {
    for (const p of [
      { requestId: 'r1', user: 'demo', agent: 'demo', sentAt: 1700000000000 - 6 * 60 * 1000 }, // too old
      { requestId: 'r2', user: 'demo', agent: 'other', sentAt: 1700000000000 }, // another agent's conversation
      { requestId: 'r3', user: 'bob', agent: 'demo', sentAt: 1700000000000 }, // another user's
      { requestId: 'r4', user: 'demo', agent: 'demo', sentAt: 1700000000000 + 3600000 }, // from the future
    ]) {
      const api = new FakeAPI();
      const h = harness({ fetch: api.fetch, pendingNewSession: p });
      h.connect();
      await settle();
      assert.equal(api.calls.length, 0, JSON.stringify(p));
      assert.deepEqual(h.events.pendingNew, [['settled', p.requestId]]);
      assert.equal(h.events.controls.canSend, true);
    }
    // With a session to resume the kept message is not looked for.
    const api = new FakeAPI();
    const h = harness({ sessionId: 's9', fetch: api.fetch, pendingNewSession: { requestId: 'r5', user: 'demo', agent: 'demo', sentAt: 1700000000000 } });
    h.connect();
    await settle();
    assert.equal(api.calls.length, 0);
  },

  async 'never another agent\'s run, another user\'s session or a child run, whatever the request_id'() {
    const api = new FakeAPI();
    api.add('s-agent', 'r-mine', { agent: 'other' });
    api.add('s-child', 'r-mine', { parent: 'run0' });
    api.sessions.unshift({ session_id: 's-user', user_id: 'bob' }); // a listing that ignored user_id
    api.fetch = ((inner) => (url, init) => url.startsWith('/v1/sessions?')
      ? Promise.resolve({ ok: true, status: 200, json: () => Promise.resolve({ sessions: api.sessions }) })
      : inner(url, init))(api.fetch);
    api.events['s-user'] = [{ seq: 2, type: 'run_started', run_id: 'r', parent_run_id: '', payload: { request_id: 'r-mine', agent_id: 'demo' } }];
    const h = harness({ fetch: api.fetch, pendingNewSession: { requestId: 'r-mine', user: 'demo', agent: 'demo', sentAt: 1700000000000 - 30000 } });
    h.connect();
    for (let i = 0; i < 5; i++) {
      await settle();
      h.advance(2000);
    }
    await settle();
    assert.deepEqual(h.events.sessions, []);
    assert.equal(api.calls.filter((c) => c[0] === '/v1/sessions/s-user/events?after_seq=0&limit=10').length, 0, 'another user\'s session is not even read');
    assert.equal(h.chat.snapshot().recovering, false);
  },

  async 'server unreachable: the kept message stays for a later load'() {
    const api = new FakeAPI();
    api.down = true;
    const h = harness({ fetch: api.fetch, pendingNewSession: { requestId: 'r-mine', user: 'demo', agent: 'demo', sentAt: 1700000000000 - 60000 } });
    h.connect();
    for (let i = 0; i < 4; i++) {
      await settle();
      h.advance(2000);
    }
    assert.equal(h.chat.snapshot().recovering, false);
    assert.deepEqual(h.events.pendingNew, [], 'not settled: unknown is not absent');
    assert.match(h.events.toasts[0][0], /Could not check/);
    assert.equal(h.chat.pendingNew.requestId, 'r-mine');
  },

  async 'connection lost before run_started of a new session: found again after the reconnect'() {
    const api = new FakeAPI();
    const h = harness({ fetch: api.fetch });
    let s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    s.drop();
    assert.deepEqual(h.msgs(), [['user', 'hi', 'unconfirmed']]);
    api.add('s1', rid);
    h.fireTimer();
    s = h.connect();
    assert.equal(h.events.controls.canSend, false);
    await settle();
    assert.deepEqual(h.events.sessions, ['s1']);
    assert.deepEqual(s.ofType('subscribe').map((m) => [m.session_id, m.after_seq]), [['s1', 0]]);
    s.push(ev(2, 'run_started', { request_id: rid, message: { role: 'user', content: 'hi' } }));
    s.push(ev(3, 'delta', { text: 'yo' }));
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', 'yo', 'running']], 'the message once, confirmed');
    assert.deepEqual(h.events.pendingNew.map((x) => x[0]), ['pending', 'settled']);
  },

  async 'connection lost before a new session\'s first message left: marked not sent after the commit bound'() {
    const api = new FakeAPI();
    const h = harness({ fetch: api.fetch });
    let s = h.connect();
    h.chat.send('hi');
    s.drop();
    h.fireTimer(); // the reconnect
    s = h.connect();
    for (let i = 0; i < 30 && h.chat.snapshot().recovering; i++) {
      await settle();
      h.advance(1000);
    }
    assert.equal(h.chat.snapshot().recovering, false);
    assert.deepEqual(h.msgs(), [['user', 'hi', 'failed']]);
    assert.match(h.chat.snapshot().messages[0].detail, /never reached the server/);
    assert.equal(h.events.toasts.length, 0, 'the failed bubble says it');
    assert.equal(h.events.controls.canSend, true);
  },

  'a message queued in an existing session: the QUEUED naming its request_id confirms it; cancelled while queued, the input is free'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(2, 'run_started', { request_id: 'r-old', message: { role: 'user', content: 'before' } }));
    s.push(ev(3, 'done', {}));
    h.chat.send('hi');
    const rid = s.last().request_id;
    // The global cap queues the run: its first QUEUED names the invoke; no run_started comes.
    s.push(ev(4, 'state', { run_id: 'run2', request_id: rid, state: 'QUEUED', detail: { position: 3 }, source: 'platform' }));
    assert.deepEqual(h.msgs().slice(2), [['user', 'hi', 'sent'], ['assistant', '', 'running']], 'confirmed, not "sending…"');
    assert.equal(h.chat.snapshot().messages[3].detail, 'queued — 3rd in line');
    assert.equal(h.chat.snapshot().activeRunId, 'run2');
    assert.equal(h.events.controls.canCancel, true);
    assert.equal(h.events.controls.canSend, false);
    // A later position names no request_id: nothing changes but the position.
    s.push(ev(5, 'state', { run_id: 'run2', state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    assert.equal(h.chat.snapshot().messages.length, 4);
    assert.equal(h.chat.cancel(), true);
    assert.deepEqual([s.last().type, s.last().run_id], ['cancel_run', 'run2']);
    s.push(ev(6, 'state', { run_id: 'run2', state: 'CANCELLED', detail: { reason: 'user', by: 'demo' }, source: 'platform' }));
    assert.deepEqual(h.msgs().slice(2), [['user', 'hi', 'sent'], ['assistant', '', 'cancelled']]);
    assert.equal(h.events.controls.canSend, true, 'a queued run cancelled never starts: the input is free');
    assert.equal(h.chat.send('again'), true);
  },

  'a new session\'s first run queued: its session opens on the QUEUED naming its request_id, shown queued and cancellable'() {
    const api = new FakeAPI();
    const h = harness({ fetch: api.fetch });
    const s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    // A left session's run queued or moving up the queue (another request_id, or none) is not ours.
    s.push(ev(4, 'state', { session_id: 's-left', run_id: 'r-left', request_id: 'r-earlier', state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    s.push(ev(5, 'state', { session_id: 's-left', run_id: 'r-left', state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    assert.deepEqual(h.events.sessions, []);
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sending']]);
    // Ours: the server queued it; its first QUEUED names the invoke's request_id, as run_started would.
    s.push(ev(3, 'state', { request_id: rid, state: 'QUEUED', detail: { position: 2 }, source: 'platform' }));
    assert.deepEqual(h.events.sessions, ['s1'], 'the session is remembered');
    assert.deepEqual(h.events.pendingNew.map((x) => x[0]), ['pending', 'settled']);
    assert.deepEqual(api.paths(), [], 'nothing looked up over HTTP');
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', '', 'running']]);
    assert.equal(h.chat.snapshot().messages[1].detail, 'queued — 2nd in line');
    assert.equal(h.chat.snapshot().activeRunId, 'run1');
    assert.equal(h.events.controls.canCancel, true);
    assert.equal(h.events.controls.canSend, false);
    // The same state again (a replay), and a later position without request_id: nothing doubles.
    s.push(ev(3, 'state', { request_id: rid, state: 'QUEUED', detail: { position: 2 }, source: 'platform' }));
    s.push(ev(6, 'state', { state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    assert.equal(h.chat.snapshot().messages.length, 2);
    assert.equal(h.chat.cancel(), true);
    assert.deepEqual([s.last().type, s.last().run_id], ['cancel_run', 'run1']);
    s.push(ev(7, 'state', { state: 'CANCELLED', detail: { reason: 'user', by: 'demo' }, source: 'platform' }));
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', '', 'cancelled']]);
    assert.equal(h.events.controls.canSend, true, 'a queued run cancelled never starts: the input is free');
  },

  'a session reloaded after its run was cancelled while queued: the first QUEUED shows its message above the reply'() {
    // No run_started ever came: the first QUEUED is the only event a client gets that holds
    // the message (its request_id was another page's, or this page's before the reload).
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    s.push(ev(2, 'run_started', { run_id: 'run1', request_id: 'r-old', message: { role: 'user', content: 'before' } }));
    s.push(ev(3, 'done', { run_id: 'run1' }));
    s.push(ev(4, 'state', { run_id: 'run2', request_id: 'r-gone', message: { role: 'user', content: 'queued one' }, state: 'QUEUED', detail: { position: 2 }, source: 'platform' }));
    s.push(ev(5, 'state', { run_id: 'run2', state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    s.push(ev(6, 'state', { run_id: 'run2', state: 'CANCELLED', detail: { reason: 'user', by: 'demo' }, source: 'platform' }));
    assert.deepEqual(h.msgs(), [['user', 'before', 'sent'], ['assistant', '', 'done'], ['user', 'queued one', 'sent'], ['assistant', '', 'cancelled']]);
    // Admitted instead, its run_started repeats the message: shown once.
    s.push(ev(7, 'state', { run_id: 'run3', message: { role: 'user', content: 'waited' }, state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    s.push(ev(8, 'state', { run_id: 'run3', state: 'RUNNING', detail: { queued_ms: 40 }, source: 'platform' }));
    s.push(ev(9, 'run_started', { run_id: 'run3', message: { role: 'user', content: 'waited' }, queued_ms: 40 }));
    s.push(ev(10, 'done', { run_id: 'run3' }));
    assert.deepEqual(h.msgs().slice(4), [['user', 'waited', 'sent'], ['assistant', '', 'done']]);
    // An invoke sent without a request_id: its first QUEUED carries the message all the same.
    s.push(ev(11, 'state', { run_id: 'run4', message: { role: 'user', content: 'no id' }, state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    s.push(ev(12, 'state', { run_id: 'run4', state: 'CANCELLED', detail: { reason: 'user', by: 'demo' }, source: 'platform' }));
    assert.deepEqual(h.msgs().slice(6), [['user', 'no id', 'sent'], ['assistant', '', 'cancelled']]);
  },

  'a queued run: the header says queued and where in line, Cancel is offered, until it is admitted'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    s.push(ev(2, 'state', { run_id: 'run1', request_id: rid, state: 'QUEUED', detail: { position: 2 }, source: 'platform' }));
    const c = () => [h.events.controls.runPhase, h.events.controls.runStatus, h.events.controls.canCancel];
    assert.deepEqual(c(), ['queued', 'queued — 2nd in line', true], 'not "running…" while it waits for a slot');
    assert.equal(h.chat.snapshot().runPhase, 'queued');
    // It moves up the queue: the later QUEUED names no request_id.
    s.push(ev(3, 'state', { run_id: 'run1', state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    assert.deepEqual(c(), ['queued', 'queued — next in line', true]);
    assert.equal(h.chat.snapshot().messages[1].detail, 'queued — next in line');
    // Admitted: RUNNING (with queued_ms), then run_started.
    s.push(ev(4, 'state', { run_id: 'run1', state: 'RUNNING', detail: { queued_ms: 900 }, source: 'platform' }));
    assert.deepEqual(c(), ['running', 'running…', true]);
    s.push(ev(5, 'run_started', { run_id: 'run1', request_id: rid, message: { role: 'user', content: 'hi' }, queued_ms: 900 }));
    assert.deepEqual(c(), ['running', 'running…', true]);
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', '', 'running']]);
    s.push(ev(6, 'done', {}));
    assert.deepEqual(c(), ['', '', false]);
  },

  'a queued run: far down the line, or with no position, and cancelled while it waits'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    const c = () => [h.events.controls.runPhase, h.events.controls.runStatus, h.events.controls.canCancel];
    s.push(ev(2, 'state', { run_id: 'run1', request_id: rid, state: 'QUEUED', detail: { position: 113 }, source: 'platform' }));
    assert.deepEqual(c(), ['queued', 'queued — 113th in line', true]);
    s.push(ev(3, 'state', { run_id: 'run1', state: 'QUEUED', detail: { position: 21 }, source: 'platform' }));
    assert.deepEqual(c(), ['queued', 'queued — 21st in line', true]);
    s.push(ev(4, 'state', { run_id: 'run1', state: 'QUEUED', detail: {}, source: 'platform' }));
    assert.deepEqual(c(), ['queued', 'queued', true]);
    assert.equal(h.chat.cancel(), true);
    assert.deepEqual(c(), ['queued', 'cancelling…', false]);
    // A position told while the cancel is under way does not hide it.
    s.push(ev(5, 'state', { run_id: 'run1', state: 'QUEUED', detail: { position: 3 }, source: 'platform' }));
    assert.deepEqual(c(), ['queued', 'cancelling…', false]);
    assert.equal(h.chat.snapshot().messages[1].detail, 'cancelling…');
    s.push(ev(6, 'state', { run_id: 'run1', state: 'CANCELLED', detail: { reason: 'user', by: 'demo' }, source: 'platform' }));
    assert.deepEqual(c(), ['', '', false]);
    assert.equal(h.chat.snapshot().runPhase, '');
  },

  'a queued run whose RUNNING was not seen: its run_started admits it all the same'() {
    const h = harness({ sessionId: 's1' });
    const s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    s.push(ev(2, 'state', { run_id: 'run1', request_id: rid, state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    s.push(ev(4, 'run_started', { run_id: 'run1', request_id: rid, message: { role: 'user', content: 'hi' } }));
    assert.deepEqual([h.events.controls.runPhase, h.events.controls.runStatus], ['running', 'running…']);
    assert.equal(h.chat.snapshot().messages[1].detail, 'running…');
  },

  'a new session\'s first run queued, then admitted: one message, one reply'() {
    const h = harness();
    const s = h.connect();
    h.chat.send('hi');
    const rid = s.last().request_id;
    s.push(ev(3, 'state', { request_id: rid, state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    s.push(ev(3, 'state', { request_id: rid, state: 'QUEUED', detail: { position: 1 }, source: 'platform' }));
    s.push(ev(4, 'state', { state: 'RUNNING', detail: { queued_ms: 900 }, source: 'platform' }));
    s.push(ev(5, 'run_started', { request_id: rid, message: { role: 'user', content: 'hi' }, queued_ms: 900 }));
    s.push(ev(6, 'delta', { text: 'hello' }));
    s.push(ev(8, 'done', {}));
    assert.deepEqual(h.msgs(), [['user', 'hi', 'sent'], ['assistant', 'hello', 'done']]);
    assert.equal(h.events.controls.canSend, true);
  },

  async 'stopped while looking: the late answer is ignored, start looks again'() {
    const api = new FakeAPI();
    api.add('s1', 'r-mine');
    const h = harness({ fetch: api.fetch, pendingNewSession: { requestId: 'r-mine', user: 'demo', agent: 'demo', sentAt: 1700000000000 } });
    h.connect();
    h.chat.stop();
    await settle();
    assert.deepEqual(h.events.sessions, [], 'a stopped page adopts nothing');
    h.chat.start();
    const s = h.connect();
    await settle();
    assert.deepEqual(h.events.sessions, ['s1']);
    assert.deepEqual(s.ofType('subscribe').map((m) => [m.session_id, m.after_seq]), [['s1', 0]]);
  },

  async 'new session while looking: the lookup is abandoned and the kept message dropped'() {
    const api = new FakeAPI();
    const h = harness({ fetch: api.fetch });
    let s = h.connect();
    h.chat.send('hi');
    s.drop();
    h.fireTimer();
    s = h.connect();
    assert.equal(h.chat.snapshot().recovering, true);
    assert.equal(h.chat.newSession(), true);
    api.add('s1', h.events.pendingNew[0][1].requestId);
    await settle();
    h.advance(5000);
    await settle();
    assert.deepEqual(h.events.sessions, [null]);
    assert.deepEqual(h.events.pendingNew.map((x) => x[0]), ['pending', 'settled']);
    assert.equal(h.events.controls.canSend, true);
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

(async () => {
  let failed = 0;
  for (const [name, fn] of Object.entries(tests)) {
    try {
      await fn();
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
})();
