// chat.js — the chat client's protocol core: one WebSocket to /v1/ws (DESIGN.md §4), the
// conversation it implies, reconnects, and seq bookkeeping. It touches no DOM: it reports what
// changed through a `view` object (see Chat below), so app.js can render it and the node test in
// testdata/ can drive it with a fake socket and fake timers.
(function (root) {
  'use strict';

  // How long the log must stay quiet before a re-sent request whose run the replay has not
  // shown yet is shown anyway (see deferResend).
  var RESEND_GRACE_MS = 1500;

  var BACKOFF_MIN_MS = 500;
  var BACKOFF_MAX_MS = 5000;
  var WS_OPEN = 1;

  // A new session's first message whose run_started never reached the page (it was reloaded,
  // left and come back to, or lost its connection within the round trip) is looked up over HTTP
  // (see recoverNewSession). Older than this when the page comes back, it is forgotten: the
  // page starts a new conversation as it would have.
  var PENDING_NEW_MAX_AGE_MS = 5 * 60 * 1000;
  // How long after sending such a message its session may still appear. The server gives a
  // client command 15 s (commandTimeout, internal/ingress/handle.go) and commits the session,
  // the run and its run_started together; what it has not committed by then it never will.
  var PENDING_NEW_COMMIT_MS = 20 * 1000;
  // Looks before giving up, however old the message: one answer could be a hiccup.
  var PENDING_NEW_MIN_TRIES = 3;
  // The user's newest sessions with the agent searched for it; it is among the newest, created
  // after the message was sent. (No `since`: the browser's clock is not the server's.)
  var PENDING_NEW_SESSIONS = 10;
  // A new session's run_started (or run_queued) is among its first events.
  var PENDING_NEW_EVENTS = 10;

  // Event types the server appends to the session's log; they carry session_id and seq.
  var LOG_EVENTS = {
    run_started: true, delta: true, state: true, done: true, error: true,
    tool_request: true, approval_required: true,
    sub_agent_call_start: true, sub_agent_partial: true, sub_agent_complete: true, sub_agent_error: true,
    input_required: true,
  };

  // A child run's error codes that mean it was stopped rather than failed (DESIGN.md §11).
  var SUB_CANCEL_CODES = { cancelled: true, canceled: true, parent_ended: true };

  // Run states (DESIGN.md §8) a `state` event may announce as final. Matched case-sensitively:
  // agents stream free-form states of their own ("thinking", maybe "done") that end nothing.
  var TERMINAL_STATES = { DONE: 'done', FAILED: 'failed', CANCELLED: 'cancelled' };

  // What the run-status line says while a run is in one of the platform's own states
  // (DESIGN.md §8). WAITING_APPROVAL is the seed protocol's spelling of the same pause. QUEUED
  // is a root run waiting under the global run cap (docs/API.md, run caps): not running yet,
  // but the session's run all the same, and cancellable.
  var RUN_PHASES = {
    QUEUED: 'queued', RUNNING: 'running',
    PAUSED_WAITING_APPROVAL: 'waiting_approval', WAITING_APPROVAL: 'waiting_approval',
    PAUSED_WAITING_TOOL: 'waiting_tool',
  };

  // A tool card's states that nothing changes any more.
  var TOOL_FINAL = { done: true, failed: true, expired: true, closed: true, refused: true };
  // An approval card's states that nothing changes any more.
  var APPROVAL_FINAL = { approved: true, rejected: true, expired: true, cancelled: true, closed: true, refused: true };

  // What a tool call's state after an approval (state.detail.outcome) means for the approval.
  var APPROVAL_OUTCOMES = {
    DISPATCHED: 'approved', RUNNING: 'approved', WAITING_CLIENT: 'approved', SUCCEEDED: 'approved',
    FAILED: 'approved', TIMEOUT: 'approved',
    REJECTED: 'rejected', EXPIRED: 'expired', CANCELLED: 'cancelled', BLOCKED: 'rejected',
  };

  // What a tool call's final state (state.detail.outcome) says on the card of a client tool.
  var TOOL_OUTCOMES = {
    SUCCEEDED: ['done', 'done'], FAILED: ['failed', 'failed'], TIMEOUT: ['expired', 'timed out'],
    EXPIRED: ['expired', 'expired'], CANCELLED: ['closed', 'cancelled'],
  };

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

  // humanState renders a state for the status line: "PAUSED_WAITING_APPROVAL" → "paused
  // waiting approval", "calling_tool" → "calling tool", with the detail appended when it is
  // short text.
  function humanState(state, detail) {
    var s = String(state == null ? '' : state);
    if (/^[A-Z0-9_]+$/.test(s) || /^[a-z0-9]+(_[a-z0-9]+)+$/.test(s)) s = s.toLowerCase().replace(/_/g, ' ');
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

  // timeMs reads a protocol timestamp: milliseconds since the epoch (DESIGN.md §4), or an
  // RFC 3339 string. Zero, absent or unreadable → null (no deadline).
  function timeMs(v) {
    if (typeof v === 'number') return isFinite(v) && v > 0 ? v : null;
    if (typeof v !== 'string' || v === '') return null;
    var n = /^\d+$/.test(v) ? Number(v) : Date.parse(v);
    return isFinite(n) && n > 0 ? n : null;
  }

  function pad(n, w) {
    var s = String(Math.abs(n));
    while (s.length < (w || 2)) s = '0' + s;
    return s;
  }

  // clientNow is the result of the built-in client tool `client.now`: this browser's clock,
  // time zone and locale. iso is the local wall-clock time with its UTC offset (RFC 3339), so
  // an agent can read the user's time of day without knowing the zone rules. env overrides
  // what the runtime reports ({timeZone, locale, offsetMinutes}), for tests.
  function clientNow(nowMs, env) {
    env = env || {};
    var d = new Date(nowMs);
    var off = typeof env.offsetMinutes === 'number' ? env.offsetMinutes : -d.getTimezoneOffset();
    var tz = env.timeZone;
    var locale = env.locale;
    var ro = {};
    try { ro = Intl.DateTimeFormat().resolvedOptions(); } catch (e) { /* no Intl */ }
    if (!tz) tz = ro.timeZone || 'UTC';
    if (!locale) {
      var nav = root.navigator;
      locale = (nav && nav.language) || ro.locale || 'und';
    }
    var local = new Date(nowMs + off * 60000); // its UTC fields are the local wall clock
    var iso = local.getUTCFullYear() + '-' + pad(local.getUTCMonth() + 1) + '-' + pad(local.getUTCDate()) +
      'T' + pad(local.getUTCHours()) + ':' + pad(local.getUTCMinutes()) + ':' + pad(local.getUTCSeconds()) +
      '.' + pad(local.getUTCMilliseconds(), 3) +
      (off === 0 ? 'Z' : (off > 0 ? '+' : '-') + pad(Math.floor(Math.abs(off) / 60)) + ':' + pad(Math.abs(off) % 60));
    return { iso: iso, epoch_ms: nowMs, time_zone: tz, utc_offset_minutes: off, locale: locale };
  }

  // builtinClientTools are the tools this page runs when an agent asks for them. Each takes
  // (args, ctx {now, toolCallId, runId}) and returns the result, or a promise of it.
  function builtinClientTools(env) {
    return {
      'client.now': function (args, ctx) { return clientNow(ctx.now(), env); },
    };
  }

  function argsText(v) {
    if (v == null) return '';
    if (typeof v === 'string') return v;
    try { return JSON.stringify(v); } catch (e) { return String(v); }
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
  //                added(item, before) / updated(item) / cleared()   items: see addItem;
  //                  before, when set, is the item the new one goes in front of (insertItem);
  //                  item.containerId, when set, is the sub-agent card the item belongs inside
  //                controls({canSend, canCancel, canNewSession, busy, runPhase, runStatus, asking})
  //                  asking: the question the agent asked (input_required) that the next
  //                  message answers, or ''; send(text, {newIntention: true}) starts a new topic
  //                  runPhase: queued|running|waiting_approval|waiting_tool|'' for the active run
  //                session(sessionId)        the session changed (persist it)
  //                newSessionPending(p) / newSessionSettled(p)   a new session's first message
  //                  {requestId, user, agent, sentAt, text} was sent / was answered or given up:
  //                  persist p until then, and pass it back as pendingNewSession on a reload
  //                restoreDraft(text)   a message an earlier load sent never reached the server:
  //                  put it back in the message box (if the user has not typed another)
  //                toast(text, kind)
  //   clientTools  name → function(args, ctx) run when an agent asks this page for that tool;
  //                defaults to builtinClientTools (client.now)
  //   env          {timeZone, locale, offsetMinutes} for client.now; defaults to the runtime's
  //   pendingNewSession  with no sessionId: the first message of a new session an earlier load
  //                of the page sent and saw no answer to (newSessionPending); its session is
  //                looked up and resumed (recoverNewSession)
  //   WebSocket, setTimeout, clearTimeout, now, log, fetch   injectable for tests; default to globals
  function Chat(opts) {
    this.url = opts.url;
    this.settings = opts.settings;
    this.view = opts.view || {};
    this.WebSocket = opts.WebSocket || root.WebSocket;
    this.setTimeout = opts.setTimeout || root.setTimeout.bind(root);
    this.clearTimeout = opts.clearTimeout || root.clearTimeout.bind(root);
    this.now = opts.now || Date.now;
    this.log = opts.log || root.console;
    this.clientTools = opts.clientTools || builtinClientTools(opts.env);
    this.fetch = opts.fetch || (root.fetch ? root.fetch.bind(root) : null);

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
    this.asking = null;       // {runId, question}: the agent's question the next message answers
    this.requests = new Map(); // request_id → what a seq-less error reply would refer to
    this.toolCards = new Map(); // tool_call_id → its card (tool requests are re-sent, so dedupe)
    this.approvalCards = new Map(); // approval_id → its card
    this.subCards = new Map(); // child run_id → its sub-agent card (sub_agent_call_start)
    this.deferred = new Map(); // re-sent requests of runs the replay has not reached, by id
    this.deferTimer = null;
    this.lastLogEventAt = 0;  // when the last event with seq arrived (for the re-send grace)
    this.connGen = 0;         // counts `ready`s: which connection an answer went out on
    this.nextItemId = 1;
    // The first message of a new session, sent and not yet answered by its run_started or an
    // error: {requestId, user, agent, sentAt}. Given in opts by a page loaded again before the
    // answer came (app.js keeps it in local storage through view.newSessionPending).
    this.pendingNew = this.sessionId ? null : opts.pendingNewSession || null;
    this.recovery = null;     // {pending, tries, timer, notOurs}: the lookup of pendingNew's session under way
  }

  Chat.prototype.start = function () {
    this.stopped = false;
    this.connect();
  };

  // stop closes the socket (the settings changed, or the page is going away or into the
  // browser's back/forward cache). start opens it again: it resubscribes after the last seq.
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
    this.forgetInFlight();
    this.stopRecovery();
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
    this.forgetInFlight();
    if (this.stopped || this.connection === 'unauthorized') {
      this.emitControls();
      return;
    }
    this.scheduleReconnect();
  };

  // forgetInFlight lets go of what was asked on a connection that is gone.
  Chat.prototype.forgetInFlight = function () {
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
    } else if (msg.type === 'tool_request' || msg.type === 'approval_required') {
      // After a subscribe the server sends the session's still-pending requests again, without
      // seq (DESIGN.md §4); they are deduped by tool_call_id / approval_id, not by seq.
      this.onLogEvent(msg);
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
    this.connGen++;
    this.setConnection('connected');
    if (this.sessionId) this.subscribe();
    else this.recoverNewSession();
    this.resendUnsent();
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
      this.settlePendingNew(msg.request_id);
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
      this.onApprovalRefused(about.card, msg);
      return;
    }
    if (about && about.kind === 'tool') {
      this.onToolResultRefused(about.card, msg);
      return;
    }
    this.toast(errorText(msg), 'error');
  };

  Chat.prototype.onLogEvent = function (msg) {
    var sid = msg.session_id || this.sessionId;
    if (this.sessionId == null) {
      // Only the run_started answering our own invoke may open a session — or, for a run
      // queued under the global cap, its first QUEUED, which names the invoke's request_id
      // too; anything else is from a session this page has left (after "New session").
      if (!((msg.type === 'run_started' || isQueuedState(msg)) && msg.request_id && this.unconfirmed.has(msg.request_id) && sid)) return;
      this.settlePendingNew(msg.request_id);
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
      this.lastLogEventAt = this.now();
      // The logged request itself: the replay reached it, so a deferred re-send of it is moot.
      var key = resendKey(msg);
      if (key) this.deferred.delete(key);
    } else if (resendKey(msg) && !this.runs.has(msg.run_id || '')) {
      this.deferResend(msg);
      return;
    }
    this.applyEvent(msg);
  };

  // resendKey names a request the server sends again, without seq, after a subscribe.
  function resendKey(msg) {
    if (msg.type === 'tool_request' && msg.tool_call_id) return 'tool:' + msg.tool_call_id;
    if (msg.type === 'approval_required' && msg.approval_id) return 'approval:' + msg.approval_id;
    return '';
  }

  // deferResend holds back a re-sent request (tool_request or approval_required without seq)
  // whose run this page has not seen yet. After a subscribe the server re-sends what is still
  // pending while it replays the log, in either order; shown at once, the card would open its
  // run ahead of the replayed run_started and the user's own message would be lost (issue 8
  // item 15). The replay brings the logged request itself, which shows the card in its place
  // and drops the re-send; only if the log stays quiet for RESEND_GRACE_MS without it is the
  // re-send shown as it is.
  Chat.prototype.deferResend = function (msg) {
    this.deferred.set(resendKey(msg), msg);
    if (this.lastLogEventAt === 0) this.lastLogEventAt = this.now();
    this.armDeferred();
  };

  Chat.prototype.armDeferred = function () {
    if (this.deferTimer != null) return;
    var self = this;
    var wait = Math.max(0, this.lastLogEventAt + RESEND_GRACE_MS - this.now());
    this.deferTimer = this.setTimeout(function () {
      self.deferTimer = null;
      if (self.stopped || self.deferred.size === 0) return;
      if (self.now() - self.lastLogEventAt < RESEND_GRACE_MS) {
        self.armDeferred(); // the replay is still coming in
        return;
      }
      var held = Array.from(self.deferred.values());
      self.deferred.clear();
      held.forEach(function (m) {
        if ((m.session_id || self.sessionId) === self.sessionId) self.applyEvent(m);
      });
      self.emitControls();
    }, wait);
  };

  Chat.prototype.applyEvent = function (msg) {
    switch (msg.type) {
      case 'run_started': this.onRunStarted(msg); break;
      case 'delta': this.onDelta(msg); break;
      case 'state': this.onState(msg); break;
      case 'done': this.finishRun(this.ensureRun(msg), 'done', ['done', usageText(msg.usage)].filter(Boolean).join(' · ')); break;
      case 'error': this.onRunError(msg); break;
      case 'tool_request': this.onToolRequest(msg); break;
      case 'approval_required': this.onApprovalRequired(msg); break;
      case 'sub_agent_call_start': this.onSubAgentStart(msg); break;
      case 'sub_agent_partial': this.onSubAgentPartial(msg); break;
      case 'sub_agent_complete': this.onSubAgentEnd(msg, msg.status === 'input_required' ? 'asked' : 'done'); break;
      case 'input_required': this.onInputRequired(msg); break;
      case 'sub_agent_error': this.onSubAgentEnd(msg, SUB_CANCEL_CODES[msg.code] ? 'cancelled' : 'failed'); break;
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
    if (run) {
      // Something of this run came first (ensureRun made its bubble): the user's message that
      // started it still belongs above everything of the run.
      if (!run.user && !run.parentRunId && !msg.parent_run_id) run.user = this.runUser(msg, run);
      // A queued run's run_started is its admission (the RUNNING before it says so too; this
      // holds should that one be missed): it is no longer waiting for a slot.
      if (run.phase === 'queued' && run.assistant.status === 'running') {
        run.phase = 'running';
        run.phaseText = this.phaseText('running', null);
        this.setItem(run.assistant, { statusText: run.cancelling ? 'cancelling…' : run.phaseText });
      }
      return;
    }
    var user = msg.parent_run_id ? null : this.runUser(msg, null);
    run = this.newRun(msg.run_id, msg.agent_id, msg.parent_run_id);
    run.user = user;
    if (!msg.parent_run_id) this.settleQuestion(msg.resumes_run_id || '');
  };

  // onInputRequired ends a root run whose agent asked the user (DESIGN.md §12): its bubble
  // shows the question, and the next message answers it (the same intention) unless it is
  // sent as a new topic. A child's question is its caller's to answer; clients get it on the
  // child's card (sub_agent_complete), so one reaching here is ignored.
  Chat.prototype.onInputRequired = function (msg) {
    if (msg.parent_run_id) return;
    var run = this.ensureRun(msg);
    var q = typeof msg.question === 'string' ? msg.question : '';
    if (run.assistant.status !== 'running') return;
    run.cancelling = false;
    run.phase = '';
    this.closeNotices(run, 'all');
    var text = run.assistant.text ? run.assistant.text.replace(/\s+$/, '') + '\n\n' + q : q;
    this.setItem(run.assistant, { text: text, question: q, status: 'input_required', statusText: 'asks you — your next message answers' });
    if (this.activeRunId === run.runId) this.activeRunId = null;
    this.asking = { runId: run.runId, question: q };
  };

  // settleQuestion: a root run started; if the agent had asked something, the question is
  // answered (the run resumes it) or left (a new topic, another agent).
  Chat.prototype.settleQuestion = function (resumesRunId) {
    var asked = this.asking;
    if (!asked) return;
    this.asking = null;
    var run = this.runs.get(asked.runId);
    if (!run || run.assistant.status !== 'input_required') return;
    this.setItem(run.assistant, { statusText: resumesRunId === asked.runId ? 'answered' : 'left unanswered — a new topic started' });
  };

  // runUser is the user item of a root run starting: this page's own message, now confirmed,
  // or (a reload, another tab's message) one made from the input the run carries — above the
  // items of run when it already has some.
  Chat.prototype.runUser = function (msg, run) {
    var user = msg.request_id ? this.unconfirmed.get(msg.request_id) : null;
    if (user) {
      this.unconfirmed.delete(msg.request_id);
      if (this.pending === msg.request_id) this.pending = null;
      this.setItem(user, { status: 'sent', statusText: '', runId: msg.run_id });
      return user;
    }
    if (!msg.message) return null;
    var fields = { role: 'user', text: contentText(msg.message.content), status: 'sent', runId: msg.run_id };
    if (!run) return this.addItem(fields);
    return this.insertItem(fields, run.notices.length ? run.notices[0] : run.assistant);
  };

  Chat.prototype.newRun = function (runId, agentId, parentRunId) {
    var run = {
      runId: runId, parentRunId: parentRunId || null, cancelling: false, notices: [],
      phase: 'running', phaseText: 'running…',
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
    // A run queued under the global cap answers its invoke with QUEUED, its run_started coming
    // only when it is admitted (never, if it is cancelled while it waits): the first QUEUED
    // names the invoke's request_id and carries its message, and confirms this page's message
    // — or, on a reload or in another tab, shows it — as run_started would.
    if (isQueuedState(msg) && (msg.request_id || msg.message) && !run.user) run.user = this.runUser(msg, run);
    // An agent's own state (source "agent") is never the run's, whatever its name (docs/API.md).
    var state = msg.source === 'agent' ? '' : String(msg.state || '');
    var detail = msg.detail && typeof msg.detail === 'object' && !Array.isArray(msg.detail) ? msg.detail : null;
    if (detail && state) this.settleCards(detail);
    if (TERMINAL_STATES.hasOwnProperty(state)) {
      this.finishRun(run, TERMINAL_STATES[state], humanState(state, msg.detail));
      return;
    }
    if (run.assistant.status !== 'running') return;
    var phase = RUN_PHASES[state];
    if (!phase) {
      // A state of the agent's own ("thinking"): shown on its bubble unless the platform has
      // paused the run, which says more ("waiting for your approval"); the phase stays.
      if (run.phase === 'running') this.setItem(run.assistant, { statusText: run.cancelling ? 'cancelling…' : humanState(msg.state, msg.detail) });
      return;
    }
    // A bare RUNNING names no tool call: the run resumed, so whatever it waited for was
    // decided, here or elsewhere. (The platform's own RUNNING names the call and its outcome.)
    if (state === 'RUNNING' && !(detail && (detail.tool_call_id || detail.approval_id))) this.closeNotices(run, 'approvals');
    run.phase = phase;
    run.phaseText = this.phaseText(phase, detail);
    this.setItem(run.assistant, { statusText: run.cancelling ? 'cancelling…' : run.phaseText });
  };

  // isQueuedState: msg is the platform's QUEUED state of a root run.
  function isQueuedState(msg) {
    return msg.type === 'state' && msg.source !== 'agent' && msg.state === 'QUEUED' && !msg.parent_run_id && !!msg.run_id;
  }

  // phaseText is what the status lines say while the run is in phase.
  Chat.prototype.phaseText = function (phase, detail) {
    if (phase === 'queued') return queuedText(detail && detail.position);
    if (phase === 'waiting_approval') return 'waiting for your approval';
    if (phase === 'waiting_tool') {
      var name = detail && typeof detail.tool_name === 'string' ? detail.tool_name : '';
      var ours = !!detail && this.toolCards.has(detail.tool_call_id);
      if (ours || name === '' || /^client\./.test(name)) return 'waiting for this browser';
      return 'waiting for the tool “' + name + '”';
    }
    return 'running…';
  };

  // queuedText says where a queued run stands: position 1 is the next to be admitted. The
  // server tells the position only to the first 100 in line; without one it is just queued.
  function queuedText(position) {
    if (typeof position !== 'number' || !isFinite(position) || position < 1 || position % 1 !== 0) return 'queued';
    if (position === 1) return 'queued — next in line';
    var tens = position % 100;
    var suffix = tens >= 11 && tens <= 13 ? 'th' : ({ 1: 'st', 2: 'nd', 3: 'rd' })[position % 10] || 'th';
    return 'queued — ' + position + suffix + ' in line';
  }

  // settleCards applies what a platform state event says about the tool call it names
  // (DESIGN.md §4): detail.outcome is the call's state then. Past WAITING_APPROVAL the approval
  // is decided (DISPATCHED: approved, whether the run then resumes or waits for a client tool);
  // a final state settles a client tool's card.
  Chat.prototype.settleCards = function (detail) {
    var outcome = typeof detail.outcome === 'string' ? detail.outcome : '';
    if (!outcome) return;
    var ac = detail.approval_id ? this.approvalCards.get(detail.approval_id) : null;
    if (ac && outcome !== 'WAITING_APPROVAL' && ac.approval.outcome !== outcome) {
      this.setApproval(ac, { state: APPROVAL_OUTCOMES[outcome] || outcome.toLowerCase(), outcome: outcome });
    }
    var tc = detail.tool_call_id ? this.toolCards.get(detail.tool_call_id) : null;
    var to = TOOL_OUTCOMES[outcome];
    if (tc && to) this.setTool(tc, { state: to[0], outcomeText: to[1], outcome: outcome });
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
    if (prev.kind === 'subagent') {
      // A child's own end state (a platform CANCELLED state of the child): the card settles
      // now; sub_agent_error follows with the code and the duration.
      if (prev.status !== 'running') return;
      run.cancelling = false;
      run.phase = '';
      this.closeNotices(run, 'all');
      this.setSub(prev, status, error ? { error: error } : null);
      return;
    }
    if (prev.status !== 'running' && !(status === 'failed' && prev.status === 'failed' && error && !prev.error)) return;
    run.cancelling = false;
    run.phase = '';
    this.closeNotices(run, 'all');
    var patch = { status: status, statusText: statusText };
    if (error) patch.error = error;
    this.setItem(run.assistant, patch);
    if (this.activeRunId === run.runId) this.activeRunId = null;
  };

  // --- sub-agents (DESIGN.md §11): another agent called by the session's agent ---

  // containerOf is the id of the sub-agent card an item of run runId goes inside, or null for
  // an item of a root run (or of a child whose start this page never saw).
  Chat.prototype.containerOf = function (runId) {
    var card = this.subCards.get(runId || '');
    return card ? card.id : null;
  };

  // onSubAgentStart opens a card for a child run: which agent, with what input. The child's
  // own events (its states, tool requests and approvals) land on and in that card; it is nested
  // in its caller's card when the caller is a child too.
  Chat.prototype.onSubAgentStart = function (msg) {
    var id = msg.run_id;
    if (typeof id !== 'string' || id === '' || this.subCards.has(id)) return;
    var parentId = msg.parent_run_id || null;
    var parent = parentId ? this.runs.get(parentId) || null : null;
    var b = {
      runId: id, parentRunId: parentId, agentId: msg.agent_id || '', input: contentText(msg.input_summary),
      depth: typeof msg.depth === 'number' ? msg.depth : null, toolCallId: msg.tool_call_id || '',
      startedMs: timeMs(msg.ts), partial: '', output: null, usage: null, error: null, durationMs: null,
    };
    var card = this.addItem({
      role: 'notice', kind: 'subagent', runId: id, parentRunId: parentId, agentId: b.agentId, sub: b,
      text: '', status: 'running', statusText: 'running…', containerId: this.containerOf(parentId),
    });
    this.subCards.set(id, card);
    var run = this.runs.get(id);
    if (!run) {
      run = { runId: id, parentRunId: parentId, cancelling: false, notices: [], phase: 'running', phaseText: 'running…', assistant: card };
      this.runs.set(id, run);
    }
    if (parent) parent.notices.push(card);
  };

  // subCard is the card of a child run, made up from what msg says if its start was missed.
  Chat.prototype.subCard = function (msg) {
    var card = this.subCards.get(msg.run_id || '');
    if (!card && msg.run_id) {
      this.onSubAgentStart({ run_id: msg.run_id, parent_run_id: msg.parent_run_id, agent_id: msg.agent_id, ts: msg.ts });
      card = this.subCards.get(msg.run_id);
    }
    return card || null;
  };

  Chat.prototype.onSubAgentPartial = function (msg) {
    var card = this.subCard(msg);
    if (!card || typeof msg.text !== 'string' || msg.text === '') return;
    var b = Object.assign({}, card.sub, { partial: card.sub.partial + msg.text });
    this.setItem(card, { sub: b, text: b.output != null ? b.output : b.partial });
  };

  // onSubAgentEnd settles a child's card: its whole answer, or its error, and how long it took.
  Chat.prototype.onSubAgentEnd = function (msg, status) {
    var card = this.subCard(msg);
    if (!card) return;
    var patch = { durationMs: typeof msg.duration_ms === 'number' ? msg.duration_ms : null };
    if (status === 'done') {
      patch.output = typeof msg.output === 'string' ? msg.output : card.sub.partial;
      patch.usage = msg.usage || null;
    } else if (status === 'asked') {
      patch.question = typeof msg.question === 'string' ? msg.question : '';
      patch.output = card.sub.partial ? card.sub.partial.replace(/\s+$/, '') + '\n\n' + patch.question : patch.question;
    } else {
      patch.error = { code: msg.code || 'error', message: msg.message || '' };
    }
    var run = this.runs.get(card.runId);
    if (run && run.assistant === card) {
      run.cancelling = false;
      run.phase = '';
      this.closeNotices(run, 'all');
    }
    this.setSub(card, status, patch);
  };

  // setSub puts a sub-agent card in status (running|done|failed|cancelled|closed) with patch
  // applied to its details; the status line says how it ended and in how long.
  Chat.prototype.setSub = function (card, status, patch) {
    var b = Object.assign({}, card.sub, patch || {});
    var text = b.output != null ? b.output : b.partial;
    var st = status;
    var line;
    if (status === 'done') line = ['done', usageText(b.usage)].filter(Boolean).join(' · ');
    else if (status === 'asked') line = 'asked back — its caller decides';
    else if (status === 'failed') line = 'failed — ' + errorText(b.error || {});
    else if (status === 'cancelled') line = b.error && b.error.code === 'parent_ended' ? 'stopped — its caller ended' : 'cancelled';
    else line = 'the run ended';
    if (b.durationMs != null) line += ' · ' + durationText(b.durationMs);
    var fields = { sub: b, text: text, status: st, statusText: line };
    if (b.error) fields.error = b.error;
    this.setItem(card, fields);
  };

  function durationText(ms) {
    if (ms < 1000) return ms + ' ms';
    if (ms < 60000) return (Math.round(ms / 100) / 10) + ' s';
    return Math.floor(ms / 60000) + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
  }

  // --- client tools (tool_request → tool_result) ---

  // onToolRequest shows the agent's request to run a tool in this browser and, for a tool the
  // page has, runs it at once and answers. The same request comes again after every subscribe
  // while it is pending: then the answer is sent again if it went out on an older connection.
  Chat.prototype.onToolRequest = function (msg) {
    var id = msg.tool_call_id;
    if (typeof id !== 'string' || id === '') {
      this.log.warn('agentplane: tool_request without tool_call_id', msg);
      return;
    }
    var card = this.toolCards.get(id);
    if (card) {
      this.redeliverTool(card);
      return;
    }
    var run = this.ensureRun(msg);
    var name = typeof msg.tool_name === 'string' ? msg.tool_name : '';
    var t = {
      toolCallId: id, runId: run.runId, toolName: name,
      args: msg.args === undefined ? null : msg.args, argsText: argsText(msg.args),
      deadlineMs: timeMs(msg.deadline_ts),
      supported: Object.prototype.hasOwnProperty.call(this.clientTools, name) && typeof this.clientTools[name] === 'function',
      state: '', answer: null, sentGen: 0, error: null, outcome: '', outcomeText: '',
    };
    if (run.assistant.status !== 'running') t.state = 'closed';
    else if (this.passed(t.deadlineMs)) t.state = 'expired';
    else t.state = t.supported ? 'running' : 'waiting';
    card = this.addItem({
      role: 'notice', kind: 'tool', runId: run.runId, tool: t, statusText: toolStatusText(t),
      text: 'The agent asks this browser to run “' + (name || '?') + '”', containerId: this.containerOf(run.runId),
    });
    this.toolCards.set(id, card);
    run.notices.push(card);
    if (t.state === 'waiting' || t.state === 'running') this.armTool(card);
    if (t.state === 'running') this.runTool(card);
  };

  Chat.prototype.runTool = function (card) {
    var self = this;
    var t = card.tool;
    var ctx = { now: function () { return self.now(); }, toolCallId: t.toolCallId, runId: t.runId };
    var res;
    try {
      res = this.clientTools[t.toolName](t.args, ctx);
    } catch (e) {
      this.answerTool(card, { ok: false, error: { code: 'tool_error', message: errMessage(e) } });
      return;
    }
    if (res && typeof res.then === 'function') {
      res.then(function (r) {
        self.answerTool(card, { ok: true, result: r === undefined ? null : r });
      }, function (e) {
        self.answerTool(card, { ok: false, error: { code: 'tool_error', message: errMessage(e) } });
      });
      return;
    }
    this.answerTool(card, { ok: true, result: res === undefined ? null : res });
  };

  // answerTool records the answer to a request still open here and sends it.
  Chat.prototype.answerTool = function (card, answer) {
    var t = card.tool;
    if (this.toolCards.get(t.toolCallId) !== card) return; // the page has left that session
    if (t.state !== 'running' && t.state !== 'waiting') return;
    this.setTool(card, { answer: answer });
    this.sendToolAnswer(card);
  };

  Chat.prototype.sendToolAnswer = function (card) {
    var t = card.tool;
    // Past its deadline the server has timed the call out: an answer would only be refused.
    if (this.passed(t.deadlineMs)) {
      this.setTool(card, { state: 'expired' });
      return false;
    }
    var msg = { type: 'tool_result', run_id: t.runId, tool_call_id: t.toolCallId, ok: !!t.answer.ok };
    if (t.answer.ok) msg.result = t.answer.result;
    else msg.error = t.answer.error;
    if (!this.ready || !this.request(msg, { kind: 'tool', card: card })) {
      this.setTool(card, { state: 'unsent' });
      return false;
    }
    this.setTool(card, { state: 'sent', sentGen: this.connGen });
    return true;
  };

  Chat.prototype.redeliverTool = function (card) {
    var t = card.tool;
    if (t.state === 'unsent' || (t.state === 'sent' && t.sentGen !== this.connGen)) this.sendToolAnswer(card);
  };

  // resendUnsent sends, on a new connection, the answers that found no connection.
  Chat.prototype.resendUnsent = function () {
    var self = this;
    this.toolCards.forEach(function (card) {
      if (card.tool.state === 'unsent') self.sendToolAnswer(card);
    });
  };

  // armTool marks a request expired when its deadline passes before it was answered.
  Chat.prototype.armTool = function (card) {
    var self = this;
    this.atDeadline(card.tool.deadlineMs, function () {
      var t = card.tool;
      if (self.toolCards.get(t.toolCallId) !== card) return;
      if (t.state === 'waiting' || t.state === 'running' || t.state === 'unsent') self.setTool(card, { state: 'expired' });
    });
  };

  Chat.prototype.onToolResultRefused = function (card, msg) {
    if (card.tool.outcome) return; // the server's own word on the call came first
    this.setTool(card, { state: 'refused', error: { code: msg.code || 'error', message: msg.message || '' } });
  };

  // setTool replaces a tool card's state (app.js re-renders from it) and its status line.
  Chat.prototype.setTool = function (card, patch) {
    var t = Object.assign({}, card.tool, patch);
    this.setItem(card, { tool: t, statusText: toolStatusText(t) });
  };

  function toolStatusText(t) {
    switch (t.state) {
      case 'waiting': return 'this page has no tool by that name';
      case 'running': return 'running…';
      case 'unsent': return 'answer ready — waiting for the connection';
      case 'sent': return t.answer && t.answer.ok ? 'result sent' : 'declined';
      case 'done': return 'done — the agent has the result';
      case 'failed': return t.answer && !t.answer.ok ? 'declined' : 'failed';
      case 'expired': return t.outcomeText === 'timed out' ? 'timed out' : 'expired — not answered in time';
      case 'closed': return t.outcomeText || 'the run ended';
      case 'refused': return 'result refused — ' + errorText(t.error || {});
    }
    return t.state;
  }

  function errMessage(e) {
    if (e && typeof e.message === 'string' && e.message) return e.message;
    return String(e);
  }

  // --- approvals (approval_required → approval_decision) ---

  Chat.prototype.onApprovalRequired = function (msg) {
    var id = msg.approval_id;
    if (typeof id !== 'string' || id === '') {
      this.log.warn('agentplane: approval_required without approval_id', msg);
      return;
    }
    var card = this.approvalCards.get(id);
    if (card) {
      this.redeliverApproval(card);
      return;
    }
    var run = this.ensureRun(msg);
    var name = typeof msg.tool_name === 'string' && msg.tool_name ? msg.tool_name : 'a tool call';
    var summary = argsText(msg.args_summary);
    var text = 'Approval needed for “' + name + '”';
    if (summary) text += ': ' + summary;
    var a = {
      approvalId: id, runId: run.runId, toolCallId: msg.tool_call_id || '', toolName: name, argsSummary: summary,
      expiresMs: timeMs(msg.expires_at), state: '', open: false, decision: null, reason: '',
      sentGen: 0, error: null, outcome: '',
    };
    if (run.assistant.status !== 'running') a.state = 'closed';
    else if (this.passed(a.expiresMs)) a.state = 'expired';
    else a.state = 'pending';
    a.open = a.state === 'pending';
    card = this.addItem({
      role: 'notice', kind: 'approval', runId: run.runId, text: text, approval: a, statusText: approvalStatusText(a),
      containerId: this.containerOf(run.runId),
    });
    this.approvalCards.set(id, card);
    run.notices.push(card);
    if (a.state === 'pending') this.armApproval(card);
  };

  // redeliverApproval: the server still has the approval pending. A decision sent on an older
  // connection may have been lost with it; deciding again the same way is idempotent.
  Chat.prototype.redeliverApproval = function (card) {
    var a = card.approval;
    if (a.state === 'sent' && a.sentGen !== this.connGen) this.sendDecision(card);
  };

  Chat.prototype.sendDecision = function (card) {
    var a = card.approval;
    var id = this.request({
      type: 'approval_decision', run_id: a.runId, approval_id: a.approvalId,
      decision: a.decision, reason: a.reason,
    }, { kind: 'approval', card: card });
    if (!id) return false;
    this.setApproval(card, { state: 'sent', sentGen: this.connGen });
    return true;
  };

  // armApproval marks a pending approval expired once its expires_at passes on this clock; the
  // server's EXPIRED outcome follows.
  Chat.prototype.armApproval = function (card) {
    var self = this;
    this.atDeadline(card.approval.expiresMs, function () {
      var a = card.approval;
      if (self.approvalCards.get(a.approvalId) !== card) return;
      if (a.state === 'pending') self.setApproval(card, { state: 'expired' });
    });
  };

  Chat.prototype.onApprovalRefused = function (card, msg) {
    if (card.approval.outcome) return; // the server's own word on the approval came first
    var err = { code: msg.code || 'error', message: msg.message || '' };
    if (/expired/.test(err.code)) {
      this.setApproval(card, { state: 'expired', error: err });
      return;
    }
    this.setApproval(card, { state: 'refused', error: err });
    if (!alreadyDecided(err)) this.toast('Approval decision refused — ' + errorText(msg), 'error');
  };

  // setApproval replaces an approval card's state (app.js re-renders from it) and its status line.
  Chat.prototype.setApproval = function (card, patch) {
    var a = Object.assign({}, card.approval, patch);
    a.open = a.state === 'pending';
    this.setItem(card, { approval: a, statusText: approvalStatusText(a) });
  };

  // alreadyDecided tells a refusal because someone decided first (409 conflict) from others.
  function alreadyDecided(err) {
    return /conflict|already|decided/.test(err.code || '');
  }

  function approvalStatusText(a) {
    switch (a.state) {
      case 'pending': return '';
      case 'sent': return a.decision === 'approve' ? 'approving…' : 'rejecting…';
      case 'approved': return a.decision === 'approve' && a.reason ? 'approved — ' + a.reason : 'approved';
      case 'rejected': return a.decision === 'reject' && a.reason ? 'rejected — ' + a.reason : 'rejected';
      case 'expired': return 'expired';
      case 'cancelled': return 'cancelled';
      case 'closed': return 'no longer pending';
      case 'refused':
        if (alreadyDecided(a.error || {})) {
          // The server's message usually says it already ("the approval was already decided: rejected").
          var m = a.error.message || a.error.code;
          return /already decided/i.test(m) ? m : 'already decided: ' + m;
        }
        return 'decision refused — ' + errorText(a.error || {});
    }
    return a.state;
  }

  // closeNotices settles what is still open on a run's cards when the run moves on without
  // saying how: 'approvals' after a bare RUNNING, 'all' when the run ended.
  Chat.prototype.closeNotices = function (run, which) {
    var self = this;
    run.notices.forEach(function (n) {
      if (n.approval && !APPROVAL_FINAL[n.approval.state]) {
        var a = n.approval;
        // The page's own decision, sent and followed by the resume, is what happened.
        var state = a.state === 'sent' && which === 'approvals' ? (a.decision === 'approve' ? 'approved' : 'rejected') : 'closed';
        self.setApproval(n, { state: state });
      } else if (n.tool && which === 'all' && !TOOL_FINAL[n.tool.state]) {
        self.setTool(n, { state: 'closed' });
      } else if (n.sub && which === 'all' && n.status === 'running') {
        // The caller ended without a word of this child's end (the platform always sends one
        // first; a foreign server might not).
        self.setSub(n, 'closed', null);
      }
    });
  };

  // atDeadline calls fn once ms (epoch milliseconds; null means never) has passed.
  Chat.prototype.atDeadline = function (ms, fn) {
    if (ms == null) return;
    var self = this;
    // Timers overflow past 2^31 ms: a far deadline is re-armed in steps.
    var wait = Math.min(Math.max(0, ms - this.now()) + 20, 0x3fffffff);
    this.setTimeout(function () {
      if (self.stopped) return;
      if (self.passed(ms)) fn();
      else self.atDeadline(ms, fn);
    }, wait);
  };

  Chat.prototype.passed = function (ms) {
    return ms != null && this.now() >= ms;
  };

  // --- actions (called by the page) ---

  Chat.prototype.canSend = function () {
    return this.connection === 'connected' && this.pending == null && this.activeRunId == null && this.recovery == null;
  };

  // send posts one user message; it returns false (and sends nothing) if one cannot be sent now.
  // send sends a message. While the agent's question is open (input_required) the message
  // answers it; opts.newIntention starts a new topic instead (the server's new_intention).
  Chat.prototype.send = function (text, opts) {
    text = String(text == null ? '' : text);
    if (text.trim() === '' || !this.canSend()) return false;
    var msg = {
      type: 'agent_invoke', agent_id: this.settings.agent,
      message: { role: 'user', content: text },
    };
    if (opts && opts.newIntention) msg.new_intention = true;
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
    if (!this.sessionId) {
      // Until its run_started comes this message's session is known only to the server: the
      // page keeps what finds it again should the answer never reach it (recoverNewSession).
      // The text too: should the message turn out never to have reached the server, a reloaded
      // page can still show it and hand it back for sending again.
      this.pendingNew = { requestId: id, user: this.settings.user, agent: this.settings.agent, sentAt: this.now(), text: text };
      this.emit('newSessionPending', this.pendingNew);
    }
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

  // decideApproval answers an approval card; reason is optional free text. It returns false,
  // sending nothing, if the card is no longer pending or the page is offline.
  Chat.prototype.decideApproval = function (card, decision, reason) {
    var a = card && card.approval;
    if (!a || a.state !== 'pending' || !this.ready) return false;
    if (decision !== 'approve' && decision !== 'reject') return false;
    if (this.passed(a.expiresMs)) {
      this.setApproval(card, { state: 'expired' });
      return false;
    }
    a.decision = decision;
    a.reason = String(reason == null ? '' : reason).trim();
    if (this.sendDecision(card)) return true;
    a.decision = null;
    a.reason = '';
    return false;
  };

  // declineTool answers a request for a tool this page does not have: ok:false, unsupported_tool.
  Chat.prototype.declineTool = function (card) {
    var t = card && card.tool;
    if (!t || t.state !== 'waiting' || !this.ready) return false;
    this.answerTool(card, {
      ok: false,
      error: { code: 'unsupported_tool', message: 'this browser has no client tool named “' + t.toolName + '”' },
    });
    return card.tool.state === 'sent';
  };

  // newSession forgets the current session; the next message starts another. A run still
  // going in the old session carries on server-side; its events are ignored here.
  Chat.prototype.newSession = function () {
    if (this.pending != null) return false;
    this.stopRecovery();
    if (this.pendingNew) this.settlePendingNew(this.pendingNew.requestId);
    this.sessionId = null;
    this.lastSeq = 0;
    this.items = [];
    this.runs.clear();
    this.unconfirmed.clear();
    this.toolCards.clear();
    this.approvalCards.clear();
    this.subCards.clear();
    this.deferred.clear();
    this.activeRunId = null;
    this.asking = null;
    this.emit('cleared');
    this.emit('session', null);
    this.emitControls();
    return true;
  };

  // --- a new session whose run_started never reached the page ---

  // The server learns of a new session's first message and creates the session; the page
  // learns its id only from the run_started answering it. A page reloaded (or left and come
  // back to, or cut off) within that round trip would forget a conversation the server goes on
  // with. So the message's request_id is kept (pendingNew) until the answer comes, and a page
  // that is ready without a session but with such a message finds the session it created —
  // the user's own sessions with the agent over HTTP, the one whose run_started carries that
  // request_id — and resumes it from seq 0, which shows the message and the reply.
  Chat.prototype.recoverNewSession = function () {
    var p = this.pendingNew;
    if (!p || this.sessionId || this.recovery) return;
    var age = this.now() - p.sentAt;
    if (p.user !== this.settings.user || p.agent !== this.settings.agent || typeof p.requestId !== 'string' ||
        !(age >= -PENDING_NEW_COMMIT_MS && age <= PENDING_NEW_MAX_AGE_MS)) {
      // Another conversation's, or from long ago (or from a clock that jumped): not this one's.
      this.settlePendingNew(p.requestId);
      return;
    }
    if (!this.fetch) return;
    this.recovery = { pending: p, tries: 0, timer: null, notOurs: {} };
    this.lookForNewSession(this.recovery);
    this.emitControls();
  };

  Chat.prototype.lookForNewSession = function (rec) {
    var self = this;
    rec.timer = null;
    rec.tries++;
    findNewSession(this.fetch, this.settings, rec.pending, rec.notOurs).then(function (sessionId) {
      if (self.recovery !== rec) return; // stopped, or the user started afresh meanwhile
      if (sessionId) self.adoptNewSession(sessionId);
      else self.lookAgainOrGiveUp(rec, false);
    }, function (e) {
      if (self.recovery !== rec) return;
      self.log.warn('agentplane: cannot look up the session of the last message', e);
      self.lookAgainOrGiveUp(rec, true);
    });
  };

  // lookAgainOrGiveUp: the session is not there (yet), or the server could not be asked. The
  // server may still be committing it while the message is young; after that it never will.
  Chat.prototype.lookAgainOrGiveUp = function (rec, unreachable) {
    var self = this;
    var p = rec.pending;
    if (this.now() < p.sentAt + PENDING_NEW_COMMIT_MS || rec.tries < PENDING_NEW_MIN_TRIES) {
      rec.timer = this.setTimeout(function () {
        if (self.recovery === rec && !self.stopped) self.lookForNewSession(rec);
      }, Math.min(2000, 250 * Math.pow(2, rec.tries - 1)));
      return;
    }
    this.recovery = null;
    if (unreachable) {
      // Unknown, not absent: kept for the next load (or reconnect) to look again.
      this.toast('Could not check whether your last message started a conversation — reload to try again.', 'error');
    } else {
      var item = this.unconfirmed.get(p.requestId);
      this.unconfirmed.delete(p.requestId);
      this.settlePendingNew(p.requestId);
      if (item) {
        this.setItem(item, { status: 'failed', statusText: 'not sent — it never reached the server' });
      } else if (typeof p.text === 'string' && p.text !== '') {
        // Sent by an earlier load of the page: shown as it would have been, and handed back.
        this.addItem({ role: 'user', text: p.text, status: 'failed', statusText: 'not sent — it never reached the server' });
        this.emit('restoreDraft', p.text);
      } else {
        this.toast('Your last message never reached the server — please send it again.', 'error');
      }
    }
    this.emitControls();
  };

  Chat.prototype.adoptNewSession = function (sessionId) {
    this.recovery = null;
    this.settlePendingNew(this.pendingNew && this.pendingNew.requestId);
    this.setSession(sessionId);
    // From seq 0: the replay brings the run_started (confirming the message still on the page,
    // or showing it again after a reload) and everything since.
    if (this.ready) this.subscribe();
    this.emitControls();
  };

  Chat.prototype.stopRecovery = function () {
    var rec = this.recovery;
    if (!rec) return;
    this.recovery = null;
    if (rec.timer != null) this.clearTimeout(rec.timer);
  };

  // settlePendingNew: the message of requestId was answered (run_started or an error), or its
  // session was found, or it is given up; the page no longer needs to find it.
  Chat.prototype.settlePendingNew = function (requestId) {
    var p = this.pendingNew;
    if (!p || !requestId || p.requestId !== requestId) return;
    this.pendingNew = null;
    this.emit('newSessionSettled', p);
  };

  // findNewSession resolves to the id of the session the message pending ({requestId, user,
  // agent}) created, or null when there is none (yet); it rejects when the server cannot be
  // asked. Only the user's own sessions with the agent are searched (a user key lists no
  // other), and only a root run of that agent started by that very request_id matches.
  // notOurs (optional, session id → true) collects the sessions found not to be it, which a
  // later look skips: the server commits a new session with its first run's events, so a
  // session listed without that run_started never gets it.
  function findNewSession(fetch, settings, pending, notOurs) {
    notOurs = notOurs || {};
    var get = httpGetter(fetch, settings);
    var list = '/v1/sessions?user_id=' + encodeURIComponent(pending.user) + '&agent_id=' + encodeURIComponent(pending.agent) +
      '&limit=' + PENDING_NEW_SESSIONS;
    return get(list).then(function (body) {
      var sessions = (body && Array.isArray(body.sessions) ? body.sessions : []).filter(function (s) {
        return s && typeof s.session_id === 'string' && s.session_id !== '' && s.user_id === pending.user &&
          !Object.prototype.hasOwnProperty.call(notOurs, s.session_id);
      });
      var i = 0;
      function next() {
        if (i >= sessions.length) return null;
        var id = sessions[i++].session_id;
        return ownStart(get, id, pending).then(function (e) {
          if (e) return id;
          notOurs[id] = true;
          return next();
        });
      }
      return next();
    });
  }

  // httpGetter is a GET of the API's JSON with the user's key; it rejects when the server
  // cannot be asked or answers an error.
  function httpGetter(fetch, settings) {
    var init = { headers: { Authorization: 'Bearer ' + settings.key }, cache: 'no-store' };
    return function (path) {
      // In a promise: a fetch that throws at once rejects like one that fails later.
      return new Promise(function (resolve) { resolve(fetch(path, init)); }).then(function (res) {
        if (!res.ok) throw new Error('HTTP ' + res.status + ' from ' + path.split('?')[0]);
        return res.json();
      });
    };
  }

  // ownStart resolves to the event among session id's first that starts the root run pending
  // asked for (see startedBy), or null.
  function ownStart(get, id, pending) {
    return get('/v1/sessions/' + encodeURIComponent(id) + '/events?after_seq=0&limit=' + PENDING_NEW_EVENTS).then(function (b) {
      var events = b && Array.isArray(b.events) ? b.events : [];
      return events.find(function (e) { return startedBy(e, pending); }) || null;
    });
  }

  // startedBy: e (as GET /v1/sessions/{id}/events lists it) starts the root run pending asked
  // for. A queued run's run_queued carries the request_id as its run_started will.
  function startedBy(e, pending) {
    if (!e || (e.type !== 'run_started' && e.type !== 'run_queued') || e.parent_run_id) return false;
    var pl = e.payload;
    return !!pl && pl.request_id === pending.requestId && pl.agent_id === pending.agent;
  }

  // --- items and view plumbing ---

  // addItem appends a conversation item: {id, role: user|assistant|notice, text, status,
  // statusText, runId, …}. Items are mutated in place and re-announced through view.updated.
  Chat.prototype.addItem = function (fields) {
    var item = Object.assign({ id: this.nextItemId++, text: '', status: '', statusText: '', runId: null }, fields);
    this.items.push(item);
    this.emit('added', item);
    return item;
  };

  // insertItem is addItem for an item that belongs before the existing item `before` and
  // everything else of its run (view.added gets `before` as its second argument).
  Chat.prototype.insertItem = function (fields, before) {
    var item = Object.assign({ id: this.nextItemId++, text: '', status: '', statusText: '', runId: null }, fields);
    var at = this.items.length;
    for (var i = 0; i < this.items.length; i++) {
      if (this.items[i] === before || (before.runId != null && this.items[i].runId === before.runId)) {
        at = i;
        break;
      }
    }
    this.items.splice(at, 0, item);
    this.emit('added', item, before);
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
    var live = run && run.assistant.status === 'running';
    var phase = live ? run.phase : '';
    var phaseText = live ? run.phaseText : '';
    if (live && phase === 'running') {
      // The run itself is running while it waits on a sub-agent; what that child waits for
      // (the user's approval, this browser) is what the header should say.
      var waiting = this.waitingChild();
      if (waiting) {
        phase = waiting.phase;
        phaseText = waiting.phaseText;
      }
    }
    this.emit('controls', {
      canSend: this.canSend(),
      canCancel: !!run && !run.cancelling && this.ready,
      canNewSession: this.pending == null && (this.sessionId != null || this.items.length > 0),
      busy: this.pending != null || this.activeRunId != null || this.recovery != null,
      runPhase: phase,
      runStatus: live ? (run.cancelling ? 'cancelling…' : phaseText) : this.recovery ? 'looking for the conversation your last message started…' : '',
      asking: this.asking && !live ? this.asking.question : '',
    });
  };

  // waitingChild is a live sub-agent run paused for the user or this browser, if any.
  Chat.prototype.waitingChild = function () {
    var found = null;
    this.subCards.forEach(function (card) {
      if (found || card.status !== 'running') return;
      var r = this.runs.get(card.runId);
      if (r && r.phase && r.phase !== 'running') found = r;
    }, this);
    return found;
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
    var run = this.activeRunId ? this.runs.get(this.activeRunId) : null;
    return {
      connected: this.connection === 'connected',
      connection: this.connection,
      sessionId: this.sessionId,
      lastSeq: this.lastSeq,
      activeRunId: this.activeRunId,
      asking: this.asking ? this.asking.question : '',
      recovering: this.recovery != null,
      messages: this.items.filter(function (it) { return it.role !== 'notice'; }).map(function (it) {
        return { role: it.role, text: it.text, status: it.status, detail: it.statusText, runId: it.runId, question: it.question || '' };
      }),
      runPhase: run && run.assistant.status === 'running' ? run.phase : '',
      tools: this.items.filter(function (it) { return it.kind === 'tool'; }).map(function (it) {
        var t = it.tool;
        return {
          toolCallId: t.toolCallId, toolName: t.toolName, runId: t.runId, state: t.state, detail: it.statusText,
          ok: t.answer ? !!t.answer.ok : null, result: t.answer && t.answer.ok ? t.answer.result : null,
        };
      }),
      approvals: this.items.filter(function (it) { return it.kind === 'approval'; }).map(function (it) {
        var a = it.approval;
        return { approvalId: a.approvalId, toolName: a.toolName, runId: a.runId, state: a.state, decision: a.decision, detail: it.statusText };
      }),
      subAgents: this.items.filter(function (it) { return it.kind === 'subagent'; }).map(function (it) {
        var b = it.sub;
        return {
          runId: b.runId, parentRunId: b.parentRunId, agentId: b.agentId, input: b.input, depth: b.depth,
          state: it.status, text: it.text, partial: b.partial, output: b.output, error: b.error, durationMs: b.durationMs, question: b.question || "",
          detail: it.statusText,
        };
      }),
    };
  };

  var api = {
    Chat: Chat, backoffDelay: backoffDelay, contentText: contentText, humanState: humanState,
    clientNow: clientNow, timeMs: timeMs, durationText: durationText,
  };
  root.AgentplaneChatCore = api;
  if (typeof module === 'object' && module && module.exports) module.exports = api;
})(typeof window !== 'undefined' ? window : globalThis);
