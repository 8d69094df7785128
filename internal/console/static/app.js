// app.js — the chat page: settings and controls around the protocol core in chat.js; the
// conversation itself is drawn by chatview.js. Server data only ever reaches the DOM through
// textContent.
(function () {
  'use strict';

  var Core = window.AgentplaneChatCore;
  var SETTINGS_KEY = 'agentplane.chat.settings';
  var SESSION_KEY = 'agentplane.chat.session';
  var PENDING_NEW_KEY = 'agentplane.chat.pendingNewSession';
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
  // The first message of a new session that has not been answered yet (chat.js's pendingNew):
  // a page reloaded before the answer came finds that session with it.
  function pendingNewKey(s) {
    return PENDING_NEW_KEY + ':' + encodeURIComponent(s.user) + ':' + encodeURIComponent(s.agent);
  }
  function pendingNewSession(s) {
    var p = storageGet(pendingNewKey(s));
    return p && typeof p === 'object' && typeof p.requestId === 'string' && typeof p.sentAt === 'number' ? p : null;
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

  // The conversation is drawn by chatview.js, shared with the console's replay.
  var chatView = window.AgentplaneChatView(el.messages, {
    decideApproval: function (item, decision, reason) { if (chat) chat.decideApproval(item, decision, reason); },
    declineTool: function (item) { if (chat) chat.declineTool(item); },
  });

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
      chatView.added(item, before);
      el.empty.hidden = true;
      if (stick) scrollToBottom();
    },
    updated: function (item) {
      var stick = nearBottom();
      chatView.updated(item);
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
    newSessionPending: function (p) { storageSet(pendingNewKey(p), p); },
    newSessionSettled: function (p) {
      // Another tab of the same user and agent may have sent a first message of its own since.
      var stored = pendingNewSession(p);
      if (stored && stored.requestId === p.requestId) storageSet(pendingNewKey(p), null);
    },
    restoreDraft: function (text) {
      if (!el.input.value.trim()) el.input.value = text;
    },
    toast: toast,
  };

  function clearMessages() {
    chatView.cleared();
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

  // startChat connects with settings s and resumes sessionId, or starts a new conversation —
  // unless a first message sent by an earlier load of the page, left before the answer came,
  // started one: that one is found and resumed (chat.js, recoverNewSession).
  function startChat(s, sessionId) {
    if (chat) chat.stop();
    settings = s;
    showSuggestions(s.agent);
    clearMessages();
    wasBusy = false;
    el.agentLabel.textContent = s.agent;
    el.input.placeholder = 'Message ' + s.agent + ' — Enter to send, Shift+Enter for a new line';
    rememberSession(sessionId || null);
    chat = new Core.Chat({
      url: wsURL(), settings: s, sessionId: sessionId || null, view: view,
      pendingNewSession: sessionId ? null : pendingNewSession(s),
    });
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
  window.setInterval(chatView.tick, 1000);
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
  // A page left by a full load may be kept in the browser's back/forward cache: its socket is
  // closed there, so a hidden page holds no connection, and opened again (resubscribing after
  // the last seq) if the page is shown again.
  window.addEventListener('pagehide', function () { if (chat) chat.stop(); });
  window.addEventListener('pageshow', function (ev) { if (ev.persisted && chat) chat.start(); });

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
