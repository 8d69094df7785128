// app.js — the chat page: settings, rendering and controls around the protocol core in chat.js.
// Server data only ever reaches the DOM through textContent.
(function () {
  'use strict';

  var Core = window.AgentplaneChatCore;
  var SETTINGS_KEY = 'agentplane.chat.settings';
  var SESSION_KEY = 'agentplane.chat.session';
  var TOAST_MS = 8000;
  var MAX_TOASTS = 4;

  function $(id) { return document.getElementById(id); }

  var el = {
    agentLabel: $('agent-label'),
    status: $('connection-status'),
    runStatus: $('run-status'),
    newSession: $('new-session-button'),
    settingsButton: $('settings-button'),
    settings: $('settings'),
    settingsForm: $('settings-form'),
    settingsUser: $('settings-user'),
    settingsKey: $('settings-key'),
    settingsAgent: $('settings-agent'),
    settingsAgentLabel: $('settings-agent-label'),
    settingsAgentSelect: $('settings-agent-select'),
    settingsError: $('settings-error'),
    settingsClose: $('settings-close'),
    conversation: $('conversation'),
    sessionLabel: $('session-label'),
    empty: $('empty-state'),
    suggestions: $('suggestions'),
    messages: $('messages'),
    composer: $('composer'),
    input: $('message-input'),
    send: $('send-button'),
    newTopic: $('new-topic-button'),
    cancel: $('cancel-button'),
    toasts: $('toasts'),
  };

  var settings = null; // {user, key, agent} the chat runs with
  var chat = null;
  var itemEls = new Map(); // item id → its .msg element
  var countdowns = new Map(); // .countdown element → {ms, label}: deadlines shown ticking
  var wasBusy = false;

  // --- storage (localStorage may be unavailable, e.g. some private modes; then nothing persists) ---

  function storageGet(key) {
    try { return JSON.parse(window.localStorage.getItem(key) || 'null'); } catch (e) { return null; }
  }
  function storageSet(key, value) {
    try {
      if (value == null) window.localStorage.removeItem(key);
      else window.localStorage.setItem(key, JSON.stringify(value));
    } catch (e) { /* not persisted */ }
  }
  function sessionKey(s) {
    return SESSION_KEY + ':' + encodeURIComponent(s.user) + ':' + encodeURIComponent(s.agent);
  }

  // --- the URL fragment: #user=…&key=…&agent=…&session=… (never sent to the server) ---

  function fragmentParams() {
    return new URLSearchParams(window.location.hash.replace(/^#/, ''));
  }
  function setFragment(params) {
    var h = params.toString();
    // replaceState: no history entry per session, and no hashchange event.
    window.history.replaceState(null, '', h ? '#' + h : window.location.pathname + window.location.search);
  }

  function complete(s) { return !!(s && s.user && s.key && s.agent); }

  // initialSettings picks what to connect with. Complete settings in the fragment win and are
  // remembered; a link without a session (the one `serve --demo` prints) starts a new
  // conversation. Otherwise the remembered settings are used and the last session resumes.
  function initialSettings() {
    var p = fragmentParams();
    var frag = { user: p.get('user') || '', key: p.get('key') || '', agent: p.get('agent') || '' };
    var stored = storageGet(SETTINGS_KEY) || {};
    var s;
    var session = p.get('session') || '';
    if (complete(frag)) {
      s = frag;
      storageSet(SETTINGS_KEY, s);
    } else {
      s = { user: frag.user || stored.user || '', key: frag.key || stored.key || '', agent: frag.agent || stored.agent || '' };
      if (!session && complete(s)) session = storageGet(sessionKey(s)) || '';
    }
    return { settings: s, session: typeof session === 'string' ? session : '' };
  }

  function rememberSession(sessionId) {
    var p = fragmentParams();
    if (sessionId) p.set('session', sessionId); else p.delete('session');
    setFragment(p);
    if (settings) storageSet(sessionKey(settings), sessionId || null);
    el.sessionLabel.hidden = !sessionId;
    el.sessionLabel.textContent = sessionId ? 'Session ' + sessionId : '';
    el.sessionLabel.title = sessionId || '';
  }

  // --- rendering ---

  function nearBottom() {
    var c = el.conversation;
    return c.scrollHeight - c.scrollTop - c.clientHeight < 80;
  }
  function scrollToBottom() {
    el.conversation.scrollTop = el.conversation.scrollHeight;
  }

  function createItemEl(item) {
    if (item.kind === 'subagent') return buildSubAgentCard(item);
    var li = document.createElement('div');
    li.className = 'msg ' + item.role;
    li.setAttribute('data-testid', 'message');
    li.dataset.id = String(item.id);
    if (item.role === 'assistant') {
      var author = document.createElement('div');
      author.className = 'author';
      author.textContent = item.child ? 'sub-agent · ' + (item.agentId || '') : (item.agentId || 'assistant');
      li.appendChild(author);
      if (item.child) li.classList.add('child');
    }
    var text = document.createElement('div');
    text.className = 'text';
    li.appendChild(text);
    if (item.kind === 'tool') buildToolCard(li, item);
    if (item.kind === 'approval') buildApprovalCard(li, item);
    var status = document.createElement('div');
    status.className = 'status';
    status.setAttribute('data-testid', 'message-status');
    li.appendChild(status);
    return li;
  }

  function div(cls) {
    var d = document.createElement('div');
    d.className = cls;
    return d;
  }

  function button(label, cls, testid, onClick) {
    var b = document.createElement('button');
    b.type = 'button';
    b.className = 'btn btn-small ' + cls;
    b.textContent = label;
    b.setAttribute('data-testid', testid);
    if (onClick) b.addEventListener('click', onClick);
    return b;
  }

  function pretty(v) {
    if (v == null) return '';
    if (typeof v === 'string') return v;
    try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
  }

  // A tool card: what the agent asked this browser to run, with which arguments, and what the
  // page answered. Tools the page has run by themselves; any other gets Decline.
  function buildToolCard(li, item) {
    var t = item.tool;
    li.classList.add('card');
    li.dataset.kind = 'tool';
    li.dataset.toolCallId = t.toolCallId;
    var args = pretty(t.args);
    if (args && args !== '{}') {
      var pre = document.createElement('pre');
      pre.className = 'args';
      pre.setAttribute('data-testid', 'tool-args');
      pre.textContent = args;
      li.appendChild(pre);
    }
    var meta = div('meta');
    var cd = document.createElement('span');
    cd.className = 'countdown';
    cd.hidden = true;
    meta.appendChild(cd);
    li.appendChild(meta);
    if (!t.supported) {
      var actions = div('actions');
      var run = button('Run', 'btn-primary', 'run-tool-button');
      run.disabled = true;
      run.title = 'This page has no tool by that name';
      actions.appendChild(run);
      actions.appendChild(button('Decline', 'btn-danger', 'decline-button', function () { if (chat) chat.declineTool(item); }));
      li.appendChild(actions);
    }
    var result = document.createElement('details');
    result.className = 'result';
    result.hidden = true;
    var summary = document.createElement('summary');
    result.appendChild(summary);
    var body = document.createElement('pre');
    body.setAttribute('data-testid', 'tool-result');
    result.appendChild(body);
    li.appendChild(result);
  }

  function updateToolCard(li, item) {
    var t = item.tool;
    li.dataset.state = t.state;
    var pending = t.state === 'waiting' || t.state === 'running' || t.state === 'unsent';
    setCountdown(li, pending ? t.deadlineMs : null, 'answer due in');
    var actions = li.querySelector('.actions');
    if (actions) {
      // Decline is offered while the request waits; once answered or over, the row goes.
      actions.hidden = t.state !== 'waiting';
      li.querySelector('[data-testid="decline-button"]').disabled = t.state !== 'waiting';
    }
    var result = li.querySelector('.result');
    result.hidden = !t.answer;
    if (t.answer) {
      result.querySelector('summary').textContent = t.answer.ok ? 'Result of this browser' : 'Error sent';
      result.querySelector('pre').textContent = pretty(t.answer.ok ? t.answer.result : t.answer.error);
    }
  }

  // An approval card: Approve / Reject with an optional reason, until the platform says how
  // it went (or the approval expires).
  function buildApprovalCard(li, item) {
    li.classList.add('card');
    li.dataset.kind = 'approval';
    li.dataset.approvalId = item.approval.approvalId;
    var meta = div('meta');
    var cd = document.createElement('span');
    cd.className = 'countdown';
    cd.hidden = true;
    meta.appendChild(cd);
    li.appendChild(meta);
    var actions = div('actions');
    var reason = document.createElement('input');
    reason.type = 'text';
    reason.className = 'reason';
    reason.maxLength = 500;
    reason.placeholder = 'Reason (optional)';
    reason.setAttribute('aria-label', 'Reason for the decision (optional)');
    reason.setAttribute('data-testid', 'approval-reason');
    actions.appendChild(reason);
    [['approve', 'Approve', 'btn-primary'], ['reject', 'Reject', 'btn-danger']].forEach(function (d) {
      var b = button(d[1], d[2], d[0] + '-button', function () {
        if (chat) chat.decideApproval(item, d[0], reason.value);
      });
      b.dataset.decision = d[0];
      actions.appendChild(b);
    });
    li.appendChild(actions);
  }

  function updateApprovalCard(li, item) {
    var a = item.approval;
    li.dataset.state = a.state;
    var open = a.state === 'pending';
    setCountdown(li, open ? a.expiresMs : null, 'expires in');
    // Sent: the buttons stay in sight, disabled, until the outcome arrives; then they go.
    li.querySelector('.actions').hidden = !open && a.state !== 'sent';
    li.querySelectorAll('.actions button').forEach(function (b) { b.disabled = !open; });
    li.querySelector('.reason').disabled = !open;
  }

  // A sub-agent card (issue 9): another agent the session's agent called — which agent, with
  // what input, its output streaming in, what it asked of the user (its approvals and client
  // tools are nested inside), its answer or error and how long it took. Collapsible; nested by
  // caller for deeper chains.
  function buildSubAgentCard(item) {
    var li = div('msg notice card subagent');
    li.setAttribute('data-testid', 'subagent-card');
    li.dataset.id = String(item.id);
    li.dataset.kind = 'subagent';
    li.dataset.runId = item.runId;
    var d = document.createElement('details');
    d.className = 'sub';
    d.open = true;
    var summary = document.createElement('summary');
    var agent = document.createElement('span');
    agent.className = 'sub-agent';
    agent.setAttribute('data-testid', 'subagent-agent');
    summary.appendChild(agent);
    var input = document.createElement('span');
    input.className = 'sub-input';
    input.setAttribute('data-testid', 'subagent-input');
    summary.appendChild(input);
    d.appendChild(summary);
    var text = div('text sub-text');
    text.setAttribute('data-testid', 'subagent-text');
    d.appendChild(text);
    // The child's own cards (approvals, client tools, its sub-agents) go here.
    d.appendChild(div('sub-children'));
    li.appendChild(d);
    var status = div('status');
    status.setAttribute('data-testid', 'subagent-status');
    li.appendChild(status);
    return li;
  }

  function updateSubAgentCard(li, item) {
    var b = item.sub;
    // data-status, not data-state: the cards' state rules would colour the nested cards too.
    li.dataset.status = item.status || '';
    var own = li.querySelector(':scope > details');
    var agent = own.querySelector(':scope > summary > .sub-agent');
    agent.textContent = (b.agentId || 'sub-agent') + (b.depth > 1 ? ' · depth ' + b.depth : '');
    own.querySelector(':scope > summary > .sub-input').textContent = b.input ? '“' + b.input + '”' : '';
    var text = own.querySelector(':scope > .sub-text');
    text.textContent = item.text;
    text.dataset.final = b.output != null ? 'true' : 'false';
    var status = li.querySelector(':scope > .status');
    status.textContent = item.statusText || '';
    status.title = item.error ? item.error.code : '';
    li.setAttribute('aria-busy', item.status === 'running' ? 'true' : 'false');
  }

  // placeItem puts a new item's element where it belongs: inside the sub-agent card of its run
  // (item.containerId), above its run's reply, or where chat.js says (before).
  function placeItem(li, item, before) {
    var host = item.containerId != null ? itemEls.get(item.containerId) : null;
    if (host) {
      host.querySelector(':scope > details > .sub-children').appendChild(li);
      return;
    }
    // A run's tool, approval and sub-agent cards go above its reply: the reply usually comes
    // from what they returned, so it reads in the order things happened. An item chat.js
    // inserts (a user's message replayed after its run's first card) goes where it says.
    var next = before ? itemEls.get(before.id) || null : null;
    var owner = item.kind === 'subagent' ? item.parentRunId : item.runId;
    if (!next && item.kind && owner) next = el.messages.querySelector(':scope > .msg.assistant[data-run-id="' + CSS.escape(owner) + '"]');
    el.messages.insertBefore(li, next);
  }

  // --- deadlines shown as a countdown, ticked once a second ---

  function setCountdown(li, ms, label) {
    var c = li.querySelector('.countdown');
    if (ms == null) {
      countdowns.delete(c);
      c.hidden = true;
      return;
    }
    var d = { ms: ms, label: label };
    countdowns.set(c, d);
    c.hidden = false;
    renderCountdown(c, d);
  }

  function renderCountdown(c, d) {
    var left = Math.max(0, Math.ceil((d.ms - Date.now()) / 1000));
    var span = left >= 60 ? Math.floor(left / 60) + ':' + String(left % 60).padStart(2, '0') : left + ' s';
    c.textContent = d.label + ' ' + span + ' (at ' + new Date(d.ms).toLocaleTimeString() + ')';
  }

  function tickCountdowns() {
    countdowns.forEach(function (d, c) {
      if (c.isConnected) renderCountdown(c, d);
      else countdowns.delete(c);
    });
  }

  function updateItemEl(li, item) {
    if (item.kind === 'subagent') {
      updateSubAgentCard(li, item);
      return;
    }
    li.dataset.status = item.status || '';
    if (item.runId) li.dataset.runId = item.runId;
    li.querySelector('.text').textContent = item.text;
    var status = li.querySelector('.status');
    status.textContent = item.statusText || '';
    status.title = item.error ? item.error.code : '';
    // Screen readers hold back a streaming bubble until it is complete.
    if (item.role === 'assistant') li.setAttribute('aria-busy', item.status === 'running' ? 'true' : 'false');
    if (item.kind === 'tool') updateToolCard(li, item);
    if (item.kind === 'approval') updateApprovalCard(li, item);
  }

  var view = {
    connection: function (state, info) {
      var text = {
        idle: 'not connected', connecting: 'connecting…', connected: 'connected',
        reconnecting: 'reconnecting…', unauthorized: 'not authorized', stopped: 'disconnected',
      }[state] || state;
      if (state === 'reconnecting' && info.delayMs) text = 'reconnecting in ' + Math.ceil(info.delayMs / 1000) + ' s…';
      el.status.dataset.state = state;
      el.status.textContent = text;
      if (state === 'unauthorized') openSettings(info.message || 'The server refused this user id and key.');
    },
    added: function (item, before) {
      var stick = item.role === 'user' || nearBottom();
      var li = createItemEl(item);
      itemEls.set(item.id, li);
      updateItemEl(li, item);
      placeItem(li, item, before);
      el.empty.hidden = true;
      if (stick) scrollToBottom();
    },
    updated: function (item) {
      var li = itemEls.get(item.id);
      if (!li) return;
      var stick = nearBottom();
      updateItemEl(li, item);
      if (stick) scrollToBottom();
    },
    cleared: clearMessages,
    controls: function (c) {
      el.runStatus.hidden = !c.runStatus;
      el.runStatus.textContent = c.runStatus || '';
      el.runStatus.dataset.phase = c.runPhase || '';
      el.input.disabled = c.busy;
      el.send.disabled = !c.canSend;
      el.cancel.disabled = !c.canCancel;
      el.newSession.disabled = !c.canNewSession;
      // The agent asked something (input_required): the next message answers it, or goes out
      // as a new topic with the button beside Send.
      el.newTopic.hidden = !c.asking;
      el.newTopic.disabled = !c.canSend;
      el.composer.dataset.asking = c.asking ? 'true' : 'false';
      el.input.placeholder = c.asking ? 'Answer: ' + c.asking + ' — Enter to send' : (settings ? 'Message ' + settings.agent + ' — Enter to send, Shift+Enter for a new line' : el.input.placeholder);
      // Hand the keyboard back when a reply finishes, unless the user is busy elsewhere.
      if (wasBusy && !c.busy && el.settings.hidden && (document.activeElement === document.body || document.activeElement === el.cancel)) {
        el.input.focus();
      }
      wasBusy = c.busy;
    },
    session: rememberSession,
    toast: toast,
  };

  function clearMessages() {
    itemEls.clear();
    countdowns.clear();
    el.messages.replaceChildren();
    el.empty.hidden = false;
  }

  function toast(text, kind) {
    while (el.toasts.children.length >= MAX_TOASTS) el.toasts.firstChild.remove();
    var t = document.createElement('div');
    t.className = 'toast ' + (kind || 'info');
    t.setAttribute('role', kind === 'error' ? 'alert' : 'status');
    var span = document.createElement('span');
    span.textContent = text;
    var close = document.createElement('button');
    close.type = 'button';
    close.className = 'toast-close';
    close.setAttribute('aria-label', 'Dismiss');
    close.textContent = '×';
    close.addEventListener('click', function () { t.remove(); });
    t.appendChild(span);
    t.appendChild(close);
    el.toasts.appendChild(t);
    window.setTimeout(function () { t.remove(); }, TOAST_MS);
  }

  // --- chat lifecycle ---

  function wsURL() {
    return (window.location.protocol === 'https:' ? 'wss://' : 'ws://') + window.location.host + '/v1/ws';
  }

  // showSuggestions offers the example prompts meant for agent (data-for), or the demo agent's
  // when there are none for it.
  function showSuggestions(agent) {
    var all = el.suggestions.querySelectorAll('[data-for]');
    var group = 'demo';
    all.forEach(function (e) { if (e.dataset.for === agent) group = agent; });
    all.forEach(function (e) { e.hidden = e.dataset.for !== group; });
  }

  function startChat(s, sessionId) {
    if (chat) chat.stop();
    settings = s;
    showSuggestions(s.agent);
    clearMessages();
    wasBusy = false;
    el.agentLabel.textContent = s.agent;
    el.input.placeholder = 'Message ' + s.agent + ' — Enter to send, Shift+Enter for a new line';
    rememberSession(sessionId || null);
    chat = new Core.Chat({ url: wsURL(), settings: s, sessionId: sessionId || null, view: view });
    chat.start();
  }

  function sendFromInput(opts) {
    if (!chat) return;
    if (chat.send(el.input.value, opts)) {
      el.input.value = '';
      autosize();
    }
  }

  function autosize() {
    // CSSOM writes are allowed by the CSP; style attributes in markup would not be.
    el.input.style.height = 'auto';
    el.input.style.height = Math.min(el.input.scrollHeight, 200) + 'px';
  }

  // --- settings panel ---

  var agentsFetch = 0;

  function openSettings(errorText) {
    var s = settings || initialSettings().settings;
    el.settingsUser.value = s.user || '';
    el.settingsKey.value = s.key || '';
    el.settingsAgent.value = s.agent || '';
    el.settingsError.hidden = !errorText;
    el.settingsError.textContent = errorText || '';
    el.settingsClose.hidden = !complete(settings);
    el.settings.hidden = false;
    el.settingsButton.setAttribute('aria-expanded', 'true');
    loadAgents();
    var first = [el.settingsUser, el.settingsKey, el.settingsAgent].find(function (i) { return !i.value; });
    (errorText ? el.settingsKey : first || el.settingsUser).focus();
  }

  function closeSettings() {
    el.settings.hidden = true;
    el.settingsButton.setAttribute('aria-expanded', 'false');
  }

  function showAgentSelect(show) {
    el.settingsAgentSelect.hidden = !show;
    el.settingsAgent.hidden = show;
    el.settingsAgentLabel.htmlFor = show ? 'settings-agent-select' : 'settings-agent';
  }

  // loadAgents offers the registered agents as a dropdown. Any failure (no such endpoint, a key
  // that may not list agents) leaves the plain text field.
  function loadAgents() {
    var key = el.settingsKey.value.trim();
    var mine = ++agentsFetch;
    if (!key) { showAgentSelect(false); return; }
    window.fetch('/v1/agents', { headers: { Authorization: 'Bearer ' + key }, cache: 'no-store' })
      .then(function (res) {
        if (!res.ok) throw new Error('HTTP ' + res.status);
        return res.json();
      })
      .then(function (body) {
        if (mine !== agentsFetch) return;
        var agents = body && Array.isArray(body.agents) ? body.agents : [];
        agents = agents.filter(function (a) { return a && typeof a.agent_id === 'string' && a.agent_id; });
        if (!agents.length) { showAgentSelect(false); return; }
        var current = el.settingsAgent.value.trim();
        var sel = el.settingsAgentSelect;
        sel.replaceChildren();
        var found = false;
        agents.forEach(function (a) {
          var o = document.createElement('option');
          o.value = a.agent_id;
          var label = a.name && a.name !== a.agent_id ? a.name + ' (' + a.agent_id + ')' : a.agent_id;
          if (a.status) label += ' · ' + a.status;
          o.textContent = label;
          sel.appendChild(o);
          if (a.agent_id === current) found = true;
        });
        if (current && !found) {
          var o = document.createElement('option');
          o.value = current;
          o.textContent = current + ' (not listed)';
          sel.insertBefore(o, sel.firstChild);
        }
        sel.value = current || agents[0].agent_id;
        el.settingsAgent.value = sel.value;
        showAgentSelect(true);
      })
      .catch(function () {
        if (mine === agentsFetch) showAgentSelect(false);
      });
  }

  function saveSettings(ev) {
    ev.preventDefault();
    var s = {
      user: el.settingsUser.value.trim(),
      key: el.settingsKey.value.trim(),
      agent: el.settingsAgent.value.trim(),
    };
    if (!complete(s)) {
      el.settingsError.hidden = false;
      el.settingsError.textContent = 'User id, API key and agent are all needed.';
      return;
    }
    storageSet(SETTINGS_KEY, s);
    // Settings typed here live in local storage; drop any from the link so a reload does not
    // bring the old ones back.
    var p = fragmentParams();
    ['user', 'key', 'agent'].forEach(function (k) { p.delete(k); });
    setFragment(p);
    var sameConversation = settings && settings.user === s.user && settings.agent === s.agent;
    var session = sameConversation && chat ? chat.sessionId : storageGet(sessionKey(s));
    closeSettings();
    startChat(s, typeof session === 'string' ? session : null);
    el.input.focus();
  }

  // --- wiring ---

  el.composer.addEventListener('submit', function (ev) {
    ev.preventDefault();
    sendFromInput();
  });
  el.input.addEventListener('keydown', function (ev) {
    // isComposing/229: Enter that confirms an IME candidate must not send.
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing && ev.keyCode !== 229) {
      ev.preventDefault();
      sendFromInput();
    }
  });
  el.input.addEventListener('input', autosize);
  // The empty state's example prompts: sent at once when the page can, else put in the input.
  el.suggestions.addEventListener('click', function (ev) {
    var b = ev.target.closest('button[data-prompt]');
    if (!b) return;
    var prompt = b.dataset.prompt;
    if (chat && chat.send(prompt)) return;
    el.input.value = prompt;
    autosize();
    el.input.focus();
  });
  window.setInterval(tickCountdowns, 1000);
  el.cancel.addEventListener('click', function () { if (chat) chat.cancel(); });
  el.newTopic.addEventListener('click', function () {
    sendFromInput({ newIntention: true });
    el.input.focus();
  });
  el.newSession.addEventListener('click', function () {
    if (chat && chat.newSession()) el.input.focus();
  });
  el.settingsButton.addEventListener('click', function () {
    if (el.settings.hidden) openSettings(); else if (complete(settings)) closeSettings();
  });
  el.settingsClose.addEventListener('click', closeSettings);
  el.settingsForm.addEventListener('submit', saveSettings);
  el.settingsKey.addEventListener('change', loadAgents);
  el.settingsAgentSelect.addEventListener('change', function () {
    el.settingsAgent.value = el.settingsAgentSelect.value;
  });
  // A new link pasted into the address bar of this tab: start over with it.
  window.addEventListener('hashchange', function () { window.location.reload(); });
  window.addEventListener('online', function () { if (chat) chat.reconnectNow(); });

  // The hook browser tests assert on; see Chat.prototype.snapshot in chat.js.
  window.agentplaneChat = {
    state: function () {
      if (chat) return chat.snapshot();
      return { connected: false, connection: 'idle', sessionId: null, lastSeq: 0, activeRunId: null, messages: [] };
    },
  };

  var init = initialSettings();
  if (complete(init.settings)) {
    startChat(init.settings, init.session || null);
    el.input.focus();
  } else {
    el.agentLabel.textContent = init.settings.agent || '…';
    settings = null;
    openSettings('');
  }
})();
