// chat.js — the chat client's protocol core: one WebSocket to /v1/ws (DESIGN.md §4), the
// conversation it implies, reconnects, and seq bookkeeping. It touches no DOM: it reports what
// changed through a `view` object (see Chat below), so app.js can render it and the node test in
// testdata/ can drive it with a fake socket and fake timers.
(function (root) {
  'use strict';

  var BACKOFF_MIN_MS = 500;
  var BACKOFF_MAX_MS = 5000;
  var WS_OPEN = 1;

  // Event types the server appends to the session's log; they carry session_id and seq.
  var LOG_EVENTS = {
    run_started: true, delta: true, state: true, done: true, error: true,
    tool_request: true, approval_required: true,
  };

  // Run states (DESIGN.md §8) a `state` event may announce as final. Matched case-sensitively:
  // agents stream free-form states of their own ("thinking", maybe "done") that end nothing.
  var TERMINAL_STATES = { DONE: 'done', FAILED: 'failed', CANCELLED: 'cancelled' };

  // backoffDelay is the wait before reconnect attempt n (0-based): 0.5 s doubling to 5 s.
  function backoffDelay(n) {
    return Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * Math.pow(2, n));
  }

  // contentText turns a message's content into display text. Content is a string today; the
  // OpenAI-style list of parts is accepted too so a richer client does not blank the page.
  function contentText(content) {
    if (typeof content === 'string') return content;
    if (content == null) return '';
    if (Array.isArray(content)) {
      return content.map(function (p) {
        if (typeof p === 'string') return p;
        return p && typeof p.text === 'string' ? p.text : '';
      }).join('');
    }
    return JSON.stringify(content);
  }

  // humanState renders a run state for the status line: "PAUSED_WAITING_APPROVAL" → "paused
  // waiting approval", with the detail appended when it is short text.
  function humanState(state, detail) {
    var s = String(state == null ? '' : state);
    if (/^[A-Z0-9_]+$/.test(s)) s = s.toLowerCase().replace(/_/g, ' ');
    if (typeof detail === 'string' && detail !== '') s += s ? ' — ' + detail : detail;
    return s;
  }

  function errorText(msg) {
    var code = msg.code || 'error';
    return msg.message ? code + ': ' + msg.message : code;
  }

  function usageText(usage) {
    if (!usage || typeof usage !== 'object') return '';
    var n = usage.total_tokens != null ? usage.total_tokens : usage.tokens;
    if (n == null && usage.prompt_tokens != null && usage.completion_tokens != null) {
      n = usage.prompt_tokens + usage.completion_tokens;
    }
    return typeof n === 'number' ? n + ' tokens' : '';
  }

  function randomID(prefix) {
    var c = root.crypto;
    if (c && c.getRandomValues) {
      var b = new Uint8Array(8);
      c.getRandomValues(b);
      return prefix + Array.prototype.map.call(b, function (x) { return (x + 256).toString(16).slice(1); }).join('');
    }
    return prefix + Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
  }

  // Chat is one user's conversation with one agent.
  //
  // opts:
  //   url        WebSocket URL, e.g. "ws://127.0.0.1:8080/v1/ws"
  //   settings   {user, key, agent}
  //   sessionId  session to resume (subscribed from seq 0 after `ready`), or null for a new one
  //   view       callbacks, each optional:
  //                connection(state, info)  state: connecting|connected|reconnecting|unauthorized|stopped
  //                added(item) / updated(item) / cleared()   items: see addItem
  //                controls({canSend, canCancel, canNewSession, busy})
  //                session(sessionId)        the session changed (persist it)
  //                toast(text, kind)
  //   WebSocket, setTimeout, clearTimeout, now, log   injectable for tests; default to globals
  function Chat(opts) {
    this.url = opts.url;
    this.settings = opts.settings;
    this.view = opts.view || {};
    this.WebSocket = opts.WebSocket || root.WebSocket;
    this.setTimeout = opts.setTimeout || root.setTimeout.bind(root);
    this.clearTimeout = opts.clearTimeout || root.clearTimeout.bind(root);
    this.now = opts.now || Date.now;
    this.log = opts.log || root.console;

    this.sessionId = opts.sessionId || null;
    this.lastSeq = 0;
    this.connection = 'idle';
    this.ws = null;
    this.ready = false;
    this.attempt = 0;
    this.reconnectTimer = null;
    this.stopped = false;

    this.items = [];          // user, assistant and notice items, in display order
    this.runs = new Map();    // run_id → {assistant, user, parentRunId, cancelling, notices}
    this.unconfirmed = new Map(); // request_id → user item whose run_started has not arrived
    this.pending = null;      // request_id of the invoke awaiting run_started or an error
    this.activeRunId = null;  // the session's active root run
    this.requests = new Map(); // request_id → what a seq-less error reply would refer to
    this.nextItemId = 1;
  }

  Chat.prototype.start = function () {
    this.stopped = false;
    this.connect();
  };

  // stop closes the socket for good (the settings changed or the page is going away).
  Chat.prototype.stop = function () {
    this.stopped = true;
    if (this.reconnectTimer != null) this.clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    var ws = this.ws;
    this.ws = null;
    this.ready = false;
    if (ws) {
      try { ws.close(1000, 'bye'); } catch (e) { /* already closed */ }
    }
    this.setConnection('stopped');
  };

  // reconnectNow skips the remaining backoff, e.g. when the browser says it is back online.
  Chat.prototype.reconnectNow = function () {
    if (this.stopped || this.connection !== 'reconnecting') return;
    if (this.reconnectTimer != null) this.clearTimeout(this.reconnectTimer);
    this.reconnectTimer = null;
    this.connect();
  };

  Chat.prototype.connect = function () {
    var self = this;
    this.reconnectTimer = null;
    this.ready = false;
    this.setConnection(this.attempt === 0 ? 'connecting' : 'reconnecting');
    var ws;
    try {
      ws = new this.WebSocket(this.url);
    } catch (e) {
      this.log.warn('agentplane: cannot open WebSocket', e);
      this.scheduleReconnect();
      return;
    }
    this.ws = ws;
    // Handlers check `self.ws === ws` so a socket replaced by a newer one cannot act late.
    ws.onopen = function () {
      if (self.ws !== ws) return;
      self.sendRaw({ type: 'hello', ts: self.now(), user_id: self.settings.user, api_key: self.settings.key });
    };
    ws.onmessage = function (ev) {
      if (self.ws !== ws) return;
      self.handleFrame(ev.data);
    };
    ws.onerror = function () { /* onclose follows and handles it */ };
    ws.onclose = function () {
      if (self.ws !== ws) return;
      self.handleClose();
    };
  };

  Chat.prototype.handleClose = function () {
    this.ws = null;
    this.ready = false;
    // An invoke that was on the wire may or may not have reached the server. Say so, free the
    // input, and keep its request_id: if the resubscribe replays a run_started for it, the
    // bubble is confirmed instead of duplicated.
    if (this.pending) {
      var item = this.unconfirmed.get(this.pending);
      if (item) this.setItem(item, { status: 'unconfirmed', statusText: 'connection lost before the server confirmed this message' });
      this.pending = null;
    }
    this.requests.clear();
    this.runs.forEach(function (run) { run.cancelling = false; });
    if (this.stopped || this.connection === 'unauthorized') {
      this.emitControls();
      return;
    }
    this.scheduleReconnect();
  };

  Chat.prototype.scheduleReconnect = function () {
    var self = this;
    var delay = backoffDelay(this.attempt);
    this.attempt++;
    this.setConnection('reconnecting', { delayMs: delay });
    this.reconnectTimer = this.setTimeout(function () {
      self.reconnectTimer = null;
      if (!self.stopped) self.connect();
    }, delay);
  };

  Chat.prototype.setConnection = function (state, info) {
    this.connection = state;
    this.emit('connection', state, info || {});
    this.emitControls();
  };

  Chat.prototype.sendRaw = function (obj) {
    if (!this.ws || this.ws.readyState !== WS_OPEN) return false;
    try {
      this.ws.send(JSON.stringify(obj));
      return true;
    } catch (e) {
      this.log.warn('agentplane: send failed', e);
      return false;
    }
  };

  // request sends a client message with a fresh request_id and remembers what it was for, so a
  // seq-less error reply naming that request_id can be pinned on the right thing.
  Chat.prototype.request = function (obj, about) {
    obj.ts = this.now();
    obj.request_id = randomID('r-');
    if (!this.sendRaw(obj)) return null;
    this.requests.set(obj.request_id, about);
    return obj.request_id;
  };

  Chat.prototype.handleFrame = function (data) {
    var msg;
    try {
      msg = JSON.parse(data);
    } catch (e) {
      this.log.warn('agentplane: ignoring a frame that is not JSON', data);
      return;
    }
    if (!msg || typeof msg !== 'object' || typeof msg.type !== 'string') {
      this.log.warn('agentplane: ignoring a frame without a type', msg);
      return;
    }
    if (msg.type === 'ready') {
      this.onReady();
    } else if (typeof msg.seq === 'number') {
      this.onLogEvent(msg);
    } else if (msg.type === 'error') {
      this.onErrorReply(msg);
    } else if (LOG_EVENTS[msg.type]) {
      // A log event without seq breaks DESIGN.md §4; render it rather than lose it, but it
      // cannot take part in dedup.
      this.log.warn('agentplane: event without seq', msg);
      this.onLogEvent(msg);
    } else {
      this.log.info('agentplane: ignoring message of unknown type', msg.type, msg);
    }
    this.emitControls();
  };

  Chat.prototype.onReady = function () {
    this.ready = true;
    this.attempt = 0;
    this.setConnection('connected');
    if (this.sessionId) this.subscribe();
  };

  Chat.prototype.subscribe = function () {
    this.request(
      { type: 'subscribe', session_id: this.sessionId, after_seq: this.lastSeq },
      { kind: 'subscribe', sessionId: this.sessionId });
  };

  // onErrorReply handles an error without seq: the answer to one of our messages, not part of
  // the conversation. Before `ready` it is the answer to hello, and the server closes next.
  Chat.prototype.onErrorReply = function (msg) {
    if (!this.ready) {
      if (msg.code === 'unauthorized') {
        this.setConnection('unauthorized', { message: errorText(msg) });
      }
      this.toast('Connection refused — ' + errorText(msg), 'error');
      return;
    }
    var about = msg.request_id ? this.requests.get(msg.request_id) : null;
    if (msg.request_id) this.requests.delete(msg.request_id);
    if (about && about.kind === 'invoke') {
      var item = this.unconfirmed.get(msg.request_id);
      this.unconfirmed.delete(msg.request_id);
      if (this.pending === msg.request_id) this.pending = null;
      if (item) this.setItem(item, { status: 'failed', statusText: 'not sent — ' + errorText(msg) });
      var hint = msg.code === 'session_busy' ? ' (a reply is still running in this session)' : '';
      this.toast('Message not sent — ' + errorText(msg) + hint, 'error');
      return;
    }
    if (about && about.kind === 'subscribe') {
      // The session is gone or not ours (e.g. a stale id in the URL after the database was
      // reset): start afresh rather than retry it on every reconnect.
      if (about.sessionId === this.sessionId && /not_found|unknown|forbidden|unauthorized|invalid/.test(msg.code || '')) {
        this.toast('Could not resume session ' + about.sessionId + ' — ' + errorText(msg) + '. Starting a new one.', 'error');
        this.newSession();
        return;
      }
      this.toast('Could not resume session — ' + errorText(msg), 'error');
      return;
    }
    if (about && about.kind === 'cancel') {
      var run = this.runs.get(about.runId);
      if (run) {
        run.cancelling = false;
        this.setItem(run.assistant, { statusText: 'cancel failed — ' + errorText(msg) });
      }
      this.toast('Cancel failed — ' + errorText(msg), 'error');
      return;
    }
    if (about && about.kind === 'approval') {
      var notice = about.notice;
      this.setItem(notice, { decision: null, statusText: 'decision failed — ' + errorText(msg) });
      this.toast('Approval decision failed — ' + errorText(msg), 'error');
      return;
    }
    this.toast(errorText(msg), 'error');
  };

  Chat.prototype.onLogEvent = function (msg) {
    var sid = msg.session_id || this.sessionId;
    if (this.sessionId == null) {
      // Only the run_started answering our own invoke may open a session; anything else is
      // from a session this page has left (after "New session").
      if (!(msg.type === 'run_started' && msg.request_id && this.unconfirmed.has(msg.request_id) && sid)) return;
      this.setSession(sid);
    } else if (sid !== this.sessionId) {
      return;
    }
    if (typeof msg.seq === 'number') {
      // The log is replayed from after_seq on every (re)subscribe and the server may deliver an
      // event twice around a reconnect; seqs only grow, so anything not above the last one seen
      // has been shown already.
      if (msg.seq <= this.lastSeq) return;
      this.lastSeq = msg.seq;
    }
    switch (msg.type) {
      case 'run_started': this.onRunStarted(msg); break;
      case 'delta': this.onDelta(msg); break;
      case 'state': this.onState(msg); break;
      case 'done': this.finishRun(this.ensureRun(msg), 'done', ['done', usageText(msg.usage)].filter(Boolean).join(' · ')); break;
      case 'error': this.onRunError(msg); break;
      case 'tool_request': this.onToolRequest(msg); break;
      case 'approval_required': this.onApprovalRequired(msg); break;
      default: this.log.info('agentplane: ignoring event of unknown type', msg.type, msg);
    }
  };

  Chat.prototype.setSession = function (sessionId) {
    if (this.sessionId === sessionId) return;
    this.sessionId = sessionId;
    this.lastSeq = 0;
    this.emit('session', sessionId);
  };

  Chat.prototype.onRunStarted = function (msg) {
    var run = this.runs.get(msg.run_id);
    if (run) return; // ensureRun made it for an earlier event; nothing left to add
    var isChild = !!msg.parent_run_id;
    var user = null;
    if (!isChild) {
      user = msg.request_id ? this.unconfirmed.get(msg.request_id) : null;
      if (user) {
        this.unconfirmed.delete(msg.request_id);
        if (this.pending === msg.request_id) this.pending = null;
        this.setItem(user, { status: 'sent', statusText: '', runId: msg.run_id });
      } else if (msg.message) {
        // Replay (a reload or another tab's message): the run carries the user's input.
        user = this.addItem({ role: 'user', text: contentText(msg.message.content), status: 'sent', runId: msg.run_id });
      }
    }
    run = this.newRun(msg.run_id, msg.agent_id, msg.parent_run_id);
    run.user = user;
  };

  Chat.prototype.newRun = function (runId, agentId, parentRunId) {
    var run = {
      runId: runId, parentRunId: parentRunId || null, cancelling: false, notices: [],
      assistant: this.addItem({
        role: 'assistant', text: '', status: 'running', statusText: 'running…',
        runId: runId, agentId: agentId || this.settings.agent, child: !!parentRunId,
      }),
    };
    this.runs.set(runId, run);
    if (!parentRunId) this.activeRunId = runId;
    return run;
  };

  // ensureRun returns the run an event belongs to, creating its bubble if its run_started was
  // never seen (a child run, or a server that does not send run_started to clients).
  Chat.prototype.ensureRun = function (msg) {
    var id = msg.run_id || '';
    return this.runs.get(id) || this.newRun(id, msg.agent_id, msg.parent_run_id);
  };

  Chat.prototype.onDelta = function (msg) {
    var run = this.ensureRun(msg);
    if (typeof msg.text !== 'string' || msg.text === '') return;
    this.setItem(run.assistant, { text: run.assistant.text + msg.text });
  };

  Chat.prototype.onState = function (msg) {
    var run = this.ensureRun(msg);
    var state = String(msg.state || '');
    if (TERMINAL_STATES.hasOwnProperty(state)) {
      this.finishRun(run, TERMINAL_STATES[state], humanState(state, msg.detail));
      return;
    }
    if (run.assistant.status !== 'running') return;
    // Leaving the approval pause means someone decided, here or elsewhere.
    if (state !== 'PAUSED_WAITING_APPROVAL') this.closeNotices(run);
    this.setItem(run.assistant, { statusText: run.cancelling ? 'cancelling…' : humanState(msg.state, msg.detail) });
  };

  Chat.prototype.onRunError = function (msg) {
    if (!msg.run_id) {
      this.toast(errorText(msg), 'error');
      return;
    }
    var run = this.ensureRun(msg);
    if (msg.code === 'cancelled' || msg.code === 'canceled') {
      this.finishRun(run, 'cancelled', 'cancelled');
    } else {
      this.finishRun(run, 'failed', 'failed — ' + errorText(msg), { code: msg.code || 'error', message: msg.message || '' });
    }
  };

  // finishRun ends a run. The first terminal word stands (a `done` and a later `state DONE` say
  // the same), except that a failure's code and message may fill in a bare "failed".
  Chat.prototype.finishRun = function (run, status, statusText, error) {
    var prev = run.assistant;
    if (prev.status !== 'running' && !(status === 'failed' && prev.status === 'failed' && error && !prev.error)) return;
    run.cancelling = false;
    this.closeNotices(run);
    var patch = { status: status, statusText: statusText };
    if (error) patch.error = error;
    this.setItem(run.assistant, patch);
    if (this.activeRunId === run.runId) this.activeRunId = null;
  };

  Chat.prototype.onToolRequest = function (msg) {
    var run = this.ensureRun(msg);
    // This page registers no client tools; the call times out on the server (or another
    // client of the session runs it). Answering "failed" from here could race that client.
    var n = this.addItem({
      role: 'notice', runId: run.runId,
      text: 'The agent asked this client to run the tool “' + (msg.tool_name || '?') + '”. This page has no client tools.',
    });
    run.notices.push(n);
  };

  Chat.prototype.onApprovalRequired = function (msg) {
    var run = this.ensureRun(msg);
    var text = 'Approval needed for “' + (msg.tool_name || 'a tool call') + '”';
    if (msg.args_summary) text += ': ' + msg.args_summary;
    var n = this.addItem({
      role: 'notice', runId: run.runId, text: text,
      approval: { approvalId: msg.approval_id, runId: run.runId, open: run.assistant.status === 'running', decision: null },
    });
    run.notices.push(n);
  };

  Chat.prototype.closeNotices = function (run) {
    var self = this;
    run.notices.forEach(function (n) {
      if (n.approval && n.approval.open) {
        self.setItem(n, { approval: Object.assign({}, n.approval, { open: false }) });
      }
    });
  };

  // --- actions (called by the page) ---

  Chat.prototype.canSend = function () {
    return this.connection === 'connected' && this.pending == null && this.activeRunId == null;
  };

  // send posts one user message; it returns false (and sends nothing) if one cannot be sent now.
  Chat.prototype.send = function (text) {
    text = String(text == null ? '' : text);
    if (text.trim() === '' || !this.canSend()) return false;
    var msg = {
      type: 'agent_invoke', agent_id: this.settings.agent,
      message: { role: 'user', content: text },
    };
    if (this.sessionId) msg.session_id = this.sessionId;
    var item = this.addItem({ role: 'user', text: text, status: 'sending', statusText: 'sending…' });
    var id = this.request(msg, { kind: 'invoke' });
    if (!id) {
      this.setItem(item, { status: 'failed', statusText: 'not sent — not connected' });
      this.emitControls();
      return false;
    }
    this.unconfirmed.set(id, item);
    this.pending = id;
    this.emitControls();
    return true;
  };

  Chat.prototype.cancel = function () {
    var run = this.activeRunId ? this.runs.get(this.activeRunId) : null;
    if (!run || run.cancelling || !this.ready) return false;
    if (!this.request({ type: 'cancel_run', run_id: run.runId }, { kind: 'cancel', runId: run.runId })) return false;
    run.cancelling = true;
    this.setItem(run.assistant, { statusText: 'cancelling…' });
    this.emitControls();
    return true;
  };

  Chat.prototype.decideApproval = function (notice, decision) {
    var a = notice.approval;
    if (!a || !a.open || a.decision || !this.ready) return false;
    var ok = this.request({
      type: 'approval_decision', run_id: a.runId, approval_id: a.approvalId,
      decision: decision, reason: 'decided in the chat page',
    }, { kind: 'approval', notice: notice });
    if (!ok) return false;
    this.setItem(notice, { approval: Object.assign({}, a, { decision: decision }), statusText: decision === 'approve' ? 'approved' : 'rejected' });
    return true;
  };

  // newSession forgets the current session; the next message starts another. A run still
  // going in the old session carries on server-side; its events are ignored here.
  Chat.prototype.newSession = function () {
    if (this.pending != null) return false;
    this.sessionId = null;
    this.lastSeq = 0;
    this.items = [];
    this.runs.clear();
    this.unconfirmed.clear();
    this.activeRunId = null;
    this.emit('cleared');
    this.emit('session', null);
    this.emitControls();
    return true;
  };

  // --- items and view plumbing ---

  // addItem appends a conversation item: {id, role: user|assistant|notice, text, status,
  // statusText, runId, …}. Items are mutated in place and re-announced through view.updated.
  Chat.prototype.addItem = function (fields) {
    var item = Object.assign({ id: this.nextItemId++, text: '', status: '', statusText: '', runId: null }, fields);
    this.items.push(item);
    this.emit('added', item);
    return item;
  };

  Chat.prototype.setItem = function (item, patch) {
    Object.assign(item, patch);
    this.emit('updated', item);
  };

  Chat.prototype.toast = function (text, kind) {
    this.emit('toast', text, kind || 'info');
  };

  Chat.prototype.emitControls = function () {
    var run = this.activeRunId ? this.runs.get(this.activeRunId) : null;
    this.emit('controls', {
      canSend: this.canSend(),
      canCancel: !!run && !run.cancelling && this.ready,
      canNewSession: this.pending == null && (this.sessionId != null || this.items.length > 0),
      busy: this.pending != null || this.activeRunId != null,
    });
  };

  Chat.prototype.emit = function (name) {
    var fn = this.view[name];
    if (typeof fn !== 'function') return;
    try {
      fn.apply(this.view, Array.prototype.slice.call(arguments, 1));
    } catch (e) {
      this.log.error('agentplane: view.' + name + ' failed', e);
    }
  };

  // snapshot is the state the page exposes to tests as window.agentplaneChat.state().
  Chat.prototype.snapshot = function () {
    return {
      connected: this.connection === 'connected',
      connection: this.connection,
      sessionId: this.sessionId,
      lastSeq: this.lastSeq,
      activeRunId: this.activeRunId,
      messages: this.items.filter(function (it) { return it.role !== 'notice'; }).map(function (it) {
        return { role: it.role, text: it.text, status: it.status, detail: it.statusText, runId: it.runId };
      }),
    };
  };

  var api = { Chat: Chat, backoffDelay: backoffDelay, contentText: contentText, humanState: humanState };
  root.AgentplaneChatCore = api;
  if (typeof module === 'object' && module && module.exports) module.exports = api;
})(typeof window !== 'undefined' ? window : globalThis);
