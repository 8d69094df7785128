// console.js — the operator console's core: the key (session storage), calls to the public HTTP
// API, the follow stream (Server-Sent Events read with fetch, so the key travels as a header),
// the router that maps /console/… URLs to pages, and DOM helpers. Pages live in pages.js,
// session.js and replay.js; the timeline model in timeline.js. Server data only ever reaches the
// DOM through textContent.
(function (root) {
  'use strict';

  var KEY_STORAGE = 'agentplane.console.key';
  var PAGE_SIZE = 1000; // events per request: the API's cap for the console (issue 11)

  // --- DOM helpers ---

  // el builds an element: el('div', {class: 'x', dataset: {id: 1}, onclick: fn}, child, 'text', …).
  function el(tag, attrs) {
    var e = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (k) {
        var v = attrs[k];
        if (v == null || v === false) return;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k === 'dataset') Object.keys(v).forEach(function (d) { e.dataset[d] = v[d]; });
        else if (k.slice(0, 2) === 'on' && typeof v === 'function') e.addEventListener(k.slice(2), v);
        else if (v === true) e.setAttribute(k, '');
        else e.setAttribute(k, String(v));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(e, arguments[i]);
    return e;
  }

  function append(parent, c) {
    if (c == null || c === false) return;
    if (Array.isArray(c)) { c.forEach(function (x) { append(parent, x); }); return; }
    parent.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
  }

  // link is an in-console link: a plain href (open in a new tab works), routed without a reload.
  function link(href, text, attrs) {
    var a = el('a', Object.assign({ href: href, 'data-nav': true }, attrs || {}));
    a.textContent = text;
    return a;
  }

  function pretty(v) {
    try { return JSON.stringify(v, null, 2); } catch (e) { return String(v); }
  }

  // --- formatting ---

  function pad(n, w) { var s = String(n); while (s.length < (w || 2)) s = '0' + s; return s; }

  function fmtTime(ms) {
    if (!ms) return '—';
    var d = new Date(ms);
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }

  function fmtClock(ms) {
    var d = new Date(ms);
    return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + pad(d.getMilliseconds(), 3);
  }

  function fmtDuration(ms) {
    if (ms == null || !isFinite(ms)) return '—';
    if (ms === 0) return '0 ms';
    if (ms < 1) return Math.round(ms * 1000) + ' µs';
    if (ms < 1000) return (ms < 10 ? ms.toFixed(1) : Math.round(ms)) + ' ms';
    var s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
    var m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + Math.round(s % 60) + ' s';
    return Math.floor(m / 60) + ' h ' + (m % 60) + ' min';
  }

  function fmtCost(c) {
    if (typeof c !== 'number' || !isFinite(c)) return '—';
    if (c === 0) return '0';
    // Costs are small: show enough digits to be useful, never float noise.
    return c >= 1 ? c.toFixed(2) : Number(c.toPrecision(3)).toString();
  }

  function fmtInt(n) {
    if (typeof n !== 'number' || !isFinite(n)) return '—';
    return Math.round(n).toLocaleString('en-US');
  }

  function clip(s, n) {
    s = String(s == null ? '' : s);
    return s.length > n ? s.slice(0, n) + '…' : s;
  }

  // --- the key ---

  function storedAuth() {
    try { return JSON.parse(root.sessionStorage.getItem(KEY_STORAGE) || 'null'); } catch (e) { return null; }
  }

  var auth = storedAuth(); // {key, kind, user_id?}

  function setAuth(a) {
    auth = a;
    try {
      if (a) root.sessionStorage.setItem(KEY_STORAGE, JSON.stringify(a));
      else root.sessionStorage.removeItem(KEY_STORAGE);
    } catch (e) { /* not persisted */ }
  }

  function isAdmin() { return !!auth && auth.kind === 'admin'; }

  // APIError is an error answer of the server: status, code, message.
  function APIError(status, code, message) {
    this.status = status;
    this.code = code || 'http_' + status;
    this.message = message || ('HTTP ' + status);
  }
  APIError.prototype.toString = function () { return this.status ? this.code + ': ' + this.message : this.message; };

  // unreachable turns fetch's own failure (a TypeError, "Failed to fetch": no answer at all)
  // into an APIError that says so in words; anything else is returned as it is.
  function unreachable(err) {
    if (err instanceof TypeError) return new APIError(0, 'unreachable', 'the server cannot be reached (is it running?)');
    return err;
  }

  // api calls the HTTP API with the key and returns the decoded JSON. A 401 sends the console
  // back to the login form. A call with no whole answer within AP.apiTimeoutMs (30 s; a test may
  // set it lower) is aborted and fails as an unreachable server does (status 0), so keepLoading
  // tries again: a server that takes the connection but never answers must not leave a page
  // waiting for ever. (The follow stream does not come through here: it is long-lived.)
  function api(path, opts) {
    opts = opts || {};
    var headers = { Accept: 'application/json' };
    var key = opts.key || (auth && auth.key);
    if (key) headers.Authorization = 'Bearer ' + key;
    var ctl = new AbortController();
    var timedOut = false;
    var ms = AP.apiTimeoutMs;
    var timer = root.setTimeout(function () { timedOut = true; ctl.abort(); }, ms);
    if (opts.signal) { // the caller's own abort still works
      if (opts.signal.aborted) ctl.abort();
      else opts.signal.addEventListener('abort', function () { ctl.abort(); });
    }
    var init = { method: opts.method || 'GET', headers: headers, cache: 'no-store', signal: ctl.signal };
    if (opts.body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(opts.body);
    }
    // The timer covers the body too: an answer whose body never ends is no answer.
    return root.fetch(path, init).then(function (res) {
      return res.text().then(function (text) { return { res: res, text: text }; });
    }).then(function (got) {
      root.clearTimeout(timer);
      var body = null;
      try { body = got.text ? JSON.parse(got.text) : null; } catch (e) { body = null; }
      if (!got.res.ok) {
        var status = got.res.status;
        var err = body && body.error ? new APIError(status, body.error.code, body.error.message) : new APIError(status, '', got.text.slice(0, 200));
        if (status === 401 && !opts.key && AP.onUnauthorized) AP.onUnauthorized();
        throw err;
      }
      return body;
    }, function (err) {
      root.clearTimeout(timer);
      if (timedOut) throw new APIError(0, 'timeout', 'the server did not answer within ' + Math.round(ms / 1000) + ' s');
      throw unreachable(err);
    });
  }

  function query(params) {
    var q = new URLSearchParams();
    Object.keys(params).forEach(function (k) {
      var v = params[k];
      if (v !== undefined && v !== null && v !== '' && v !== false) q.set(k, String(v));
    });
    var s = q.toString();
    return s ? '?' + s : '';
  }

  // login checks a key with GET /v1/whoami. "user:key" is accepted as the chat page and
  // AGENTPLANE_API_KEYS spell it: the part after the first colon is the key, and it must be
  // that user's.
  function login(input) {
    input = String(input || '').trim();
    if (!input) return Promise.reject(new APIError(0, 'empty', 'enter a key'));
    function who(key) {
      return api('/v1/whoami', { key: key }).then(function (w) { return { key: key, kind: w.kind, user_id: w.user_id || '', agent_id: w.agent_id || '' }; });
    }
    return who(input).catch(function (err) {
      var i = input.indexOf(':');
      if (err.status !== 401 || i <= 0) throw err;
      var user = input.slice(0, i);
      return who(input.slice(i + 1)).then(function (a) {
        if (a.kind !== 'user' || a.user_id !== user) throw new APIError(401, 'unauthorized', 'that key is not ' + user + '\u2019s');
        return a;
      });
    }).then(function (a) {
      if (a.kind === 'agent') throw new APIError(403, 'forbidden', 'an agent key cannot use the console');
      setAuth(a);
      return a;
    });
  }

  // --- the page's life in the back/forward cache ---

  // A page left by a full load (a pasted URL, the "Chat" link, Back) may be kept whole in the
  // browser's back/forward cache, and whatever requests it has open stay open there. A follow
  // stream never ends by itself: after six such pages the browser's six connections to this
  // host were all held by hidden pages and the console stopped loading (the audit's item 1).
  // So everything long-lived stops on pagehide and starts again on a pageshow that restores
  // the page (event.persisted).
  function onPageLife(hide, show) {
    function h() { hide(); }
    function s(ev) { if (ev.persisted) show(); }
    root.addEventListener('pagehide', h);
    root.addEventListener('pageshow', s);
    return function () {
      root.removeEventListener('pagehide', h);
      root.removeEventListener('pageshow', s);
    };
  }

  // --- loading that recovers by itself ---

  var RETRY_FIRST_MS = 1000;
  var RETRY_MAX_MS = 15000;

  // retryable says whether a failed call may succeed made again as it is: no answer at all (the
  // server is restarting, or gone) or the server's own trouble (5xx, 429). A refusal (another
  // 4xx) would only be refused again.
  function retryable(err) {
    return !!err && (err.status === 0 || err.status === 429 || err.status >= 500);
  }

  // keepLoading runs load (a function returning a promise that settles once the page has drawn
  // what it read) and, given opts.every, again that many ms after each success: a page's
  // polling. A failure that may pass (retryable) is tried again after a backoff — 1 s, doubling
  // to 15 s, back to 1 s after a success — and at once when the window gets the focus back or
  // the browser is online again, so a page whose server was restarting recovers by itself. Any
  // other failure is final. Never two loads at a time: whatever comes due while one runs (a
  // retry, a poll, now()) runs once it has ended. Nothing runs while the page is in the
  // back/forward cache, and on its return what was due runs at once.
  //
  // The failure shows in the returned note (an .error-box, hidden while all is well), with when
  // the next try is and a button to try at once; opts.message(err) words it (default 'Could not
  // load: …'). opts.onError(err) hears every failure, opts.onFinal(err) a final one. Without
  // opts.every a loader stops by itself after its first success. Returns {note, now, stop}.
  function keepLoading(load, opts) {
    opts = opts || {};
    var message = opts.message || function (err) { return err.status === 404 ? 'Not found.' : 'Could not load: ' + err; };
    var text = el('span');
    var retryText = el('span', { class: 'retry-when', 'data-testid': 'retry-when' });
    var retryBtn = el('button', { type: 'button', class: 'btn btn-small', 'data-testid': 'retry-now', text: 'Try now' });
    var note = el('div', { class: 'error-box load-error', role: 'alert', 'data-testid': 'load-error', hidden: true }, text, retryText, ' ', retryBtn);
    var timer = null;
    var ticker = null;
    var busy = false;
    var again = false; // asked for while a load ran
    var failing = false; // the last load failed and another try is due
    var hidden = false; // in the back/forward cache
    var stopped = false;
    var backoff = 0;
    var retryAt = 0;

    function clearTimers() {
      if (timer != null) root.clearTimeout(timer);
      if (ticker != null) root.clearInterval(ticker);
      timer = ticker = null;
    }
    function showWhen() {
      var s = Math.max(0, Math.ceil((retryAt - Date.now()) / 1000));
      retryText.textContent = busy ? ' — trying again now…' : ' — trying again in ' + s + ' s';
    }
    function run() {
      if (stopped || hidden) return;
      if (busy) { again = true; return; }
      clearTimers();
      again = false;
      busy = true;
      note.dataset.state = failing ? 'retrying' : 'loading';
      retryBtn.disabled = true;
      if (failing) showWhen();
      var p;
      try { p = Promise.resolve(load()); } catch (e) { p = Promise.reject(e); }
      p.then(function () {
        busy = false;
        if (stopped) return;
        failing = false;
        backoff = 0;
        note.hidden = true;
        note.dataset.state = 'ok';
        if (again) run();
        else if (opts.every) { if (!hidden) timer = root.setTimeout(run, opts.every); }
        else detach(); // loaded once, nothing left to wait for: its window listeners go
      }, function (err) {
        busy = false;
        if (stopped) return;
        if (!(err instanceof APIError)) root.console.error(err); // the page's own bug, not the server
        again = false; // the backoff decides when the next try is
        if (opts.onError) opts.onError(err);
        text.textContent = message(err);
        note.hidden = false;
        if (!retryable(err)) {
          failing = false;
          note.dataset.state = 'failed';
          retryText.textContent = '';
          retryBtn.hidden = true;
          if (opts.onFinal) opts.onFinal(err);
          return;
        }
        failing = true;
        backoff = backoff ? Math.min(RETRY_MAX_MS, backoff * 2) : RETRY_FIRST_MS;
        retryAt = Date.now() + backoff;
        note.dataset.state = 'waiting';
        note.dataset.retryAt = String(retryAt);
        note.dataset.retryMs = String(backoff);
        retryBtn.hidden = false;
        retryBtn.disabled = false;
        showWhen();
        if (hidden) return;
        timer = root.setTimeout(run, backoff);
        ticker = root.setInterval(showWhen, 1000);
      });
    }
    // Back in view or back online: a page that is failing tries at once.
    function wake() { if (failing && !busy) run(); }
    retryBtn.addEventListener('click', run);
    root.addEventListener('focus', wake);
    root.addEventListener('online', wake);
    var offPageLife = onPageLife(function () {
      hidden = true;
      clearTimers();
    }, function () {
      hidden = false;
      if (failing || opts.every) run();
    });
    function detach() {
      stopped = true;
      clearTimers();
      offPageLife();
      root.removeEventListener('focus', wake);
      root.removeEventListener('online', wake);
    }
    run();
    return {
      note: note,
      // now loads again at once (after the load under way, if any): a page's own refresh.
      now: run,
      stop: detach,
    };
  }

  // --- the follow stream ---

  // follow reads GET /v1/sessions/{id}/events?follow=1 from afterSeq and calls onEvents with
  // each batch of events, in seq order, each once. A dropped stream is resumed with
  // Last-Event-ID after a backoff; so is one the page closed on entering the back/forward cache,
  // when the page comes back. onState hears 'live', 'reconnecting', 'suspended' and 'stopped'.
  // It returns {stop, lastSeq}.
  function follow(sessionId, afterSeq, onEvents, onState) {
    var last = afterSeq || 0;
    var stopped = false;
    var suspended = false;
    var ctl = null;
    var attempt = 0;
    var timer = null;
    var gen = 0; // which connection a callback belongs to: a closed one's must not act late
    function state(s, info) { if (onState) onState(s, info || {}); }
    function connect() {
      if (stopped || suspended) return;
      timer = null;
      var mine = ++gen;
      ctl = new AbortController();
      var headers = { Accept: 'text/event-stream', Authorization: 'Bearer ' + (auth && auth.key) };
      if (last > 0) headers['Last-Event-ID'] = String(last);
      root.fetch('/v1/sessions/' + encodeURIComponent(sessionId) + '/events?follow=1&after_seq=' + last, { headers: headers, signal: ctl.signal, cache: 'no-store' })
        .then(function (res) {
          if (mine !== gen) return null;
          if (!res.ok) {
            return res.text().then(function (t) {
              var b = null;
              try { b = JSON.parse(t); } catch (e) { b = null; }
              var err = b && b.error ? new APIError(res.status, b.error.code, b.error.message) : new APIError(res.status, '', t);
              err.fatal = res.status === 401 || res.status === 403 || res.status === 404;
              throw err;
            });
          }
          attempt = 0;
          state('live');
          return read(res.body.getReader(), mine);
        })
        .then(function () { retry(null, mine); }, function (err) { retry(err, mine); });
    }
    function read(reader, mine) {
      var decoder = new TextDecoder();
      var buf = '';
      function pump() {
        return reader.read().then(function (r) {
          if (r.done || stopped || mine !== gen) return;
          buf += decoder.decode(r.value, { stream: true });
          var batch = [];
          var i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            var block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            var data = null;
            block.split('\n').forEach(function (line) {
              if (line.slice(0, 6) === 'data: ') data = line.slice(6);
            });
            if (data == null) continue;
            var ev;
            try { ev = JSON.parse(data); } catch (e) { continue; }
            if (typeof ev.seq !== 'number' || ev.seq <= last) continue;
            last = ev.seq;
            batch.push(ev);
          }
          if (batch.length) onEvents(batch);
          return pump();
        });
      }
      return pump();
    }
    function retry(err, mine) {
      if (stopped || suspended || mine !== gen) return;
      if (err && err.fatal) {
        stopped = true;
        offPageLife();
        state('stopped', { error: err });
        return;
      }
      var delay = Math.min(5000, 500 * Math.pow(2, attempt++));
      state('reconnecting', { delayMs: delay, lastSeq: last, error: unreachable(err) });
      timer = root.setTimeout(connect, delay);
    }
    // close ends the current connection, if any, without a word to onState.
    function close() {
      gen++;
      if (timer) root.clearTimeout(timer);
      timer = null;
      if (ctl) ctl.abort();
      ctl = null;
    }
    var offPageLife = onPageLife(function () {
      if (stopped || suspended) return;
      suspended = true;
      close();
      state('suspended', { lastSeq: last });
    }, function () {
      if (stopped || !suspended) return;
      suspended = false;
      attempt = 0;
      connect();
    });
    connect();
    return {
      stop: function () {
        stopped = true;
        offPageLife();
        close();
        state('stopped');
      },
      lastSeq: function () { return last; },
    };
  }

  // eventsPage fetches one page of a session's (or a run's) events after afterSeq.
  function eventsPage(path, afterSeq, limit) {
    return api(path + query({ after_seq: afterSeq, limit: limit || PAGE_SIZE })).then(function (b) {
      return { events: (b && b.events) || [], next: b ? b.next_after_seq : afterSeq };
    });
  }

  // session reads one session's summary (GET /v1/sessions filtered to its id); null if absent.
  function sessionSummary(id) {
    return api('/v1/sessions' + query({ q: id, limit: 20 })).then(function (b) {
      var list = (b && b.sessions) || [];
      for (var i = 0; i < list.length; i++) if (list[i].session_id === id) return list[i];
      return null;
    });
  }

  // allPages follows next_cursor and returns every item (at most max).
  function allPages(path, params, field, max) {
    var out = [];
    function next(cursor) {
      var p = Object.assign({}, params, { limit: 1000, cursor: cursor });
      return api(path + query(p)).then(function (b) {
        out = out.concat((b && b[field]) || []);
        if (b && b.next_cursor && out.length < (max || 10000)) return next(b.next_cursor);
        return out;
      });
    }
    return next('');
  }

  // --- toasts ---

  function toast(text, kind) {
    var box = document.getElementById('toasts');
    if (!box) return;
    while (box.children.length >= 4) box.firstChild.remove();
    var t = el('div', { class: 'toast ' + (kind || 'info'), role: kind === 'error' ? 'alert' : 'status' }, el('span', { text: text }));
    t.appendChild(el('button', { type: 'button', class: 'toast-close', 'aria-label': 'Dismiss', text: '×', onclick: function () { t.remove(); } }));
    box.appendChild(t);
    root.setTimeout(function () { t.remove(); }, 8000);
  }

  // --- router ---

  var routes = [];
  var current = null; // {cleanup}

  // route registers a page: pattern like '/console/sessions/:id/replay'.
  function route(pattern, name, render, opts) {
    var keys = [];
    var re = new RegExp('^' + pattern.replace(/:([a-z]+)/g, function (_, k) { keys.push(k); return '([^/]+)'; }) + '/?$');
    routes.push({ re: re, keys: keys, name: name, render: render, admin: !!(opts && opts.admin) });
  }

  function navigate(href, replace) {
    if (replace) root.history.replaceState(null, '', href);
    else root.history.pushState(null, '', href);
    render();
  }

  // setQuery replaces the page's query string (filters) without re-rendering it.
  function setQuery(params) {
    root.history.replaceState(null, '', root.location.pathname + query(params));
  }

  function render() {
    var view = document.getElementById('view');
    if (current && current.cleanup) {
      try { current.cleanup(); } catch (e) { root.console.error(e); }
    }
    current = null;
    view.replaceChildren();
    if (!auth) { AP.showLogin(); return; }
    var path = root.location.pathname;
    if (path === '/console' || path === '/console/') { navigate('/console/sessions', true); return; }
    var params = {};
    var r = null;
    for (var i = 0; i < routes.length; i++) {
      var m = routes[i].re.exec(path);
      if (m) {
        r = routes[i];
        r.keys.forEach(function (k, j) { params[k] = decodeURIComponent(m[j + 1]); });
        break;
      }
    }
    document.querySelectorAll('#nav a[data-page]').forEach(function (a) {
      a.classList.toggle('active', !!r && path.indexOf('/console/' + a.dataset.page) === 0);
    });
    AP.page = r ? r.name : 'not_found';
    AP.pageState = null;
    if (!r) {
      view.appendChild(el('div', { class: 'page' }, el('h1', { text: 'Not found' }), el('p', { text: 'No console page at ' + path + '.' })));
      return;
    }
    if (r.admin && !isAdmin()) {
      view.appendChild(el('div', { class: 'page' }, el('h1', { text: 'Admin only' }), el('p', { class: 'muted', text: 'This page needs the admin key; you are logged in as user ' + auth.user_id + '.' })));
      return;
    }
    var q = new URLSearchParams(root.location.search);
    try {
      current = { cleanup: r.render(view, params, q) || null };
    } catch (e) {
      root.console.error(e);
      view.appendChild(el('p', { class: 'error', text: 'This page failed: ' + e }));
    }
  }

  var AP = {
    el: el, link: link, pretty: pretty, clip: clip,
    fmtTime: fmtTime, fmtClock: fmtClock, fmtDuration: fmtDuration, fmtCost: fmtCost, fmtInt: fmtInt,
    api: api, query: query, login: login, follow: follow, keepLoading: keepLoading, onPageLife: onPageLife, unreachable: unreachable,
    eventsPage: eventsPage, sessionSummary: sessionSummary,
    allPages: allPages, APIError: APIError, PAGE_SIZE: PAGE_SIZE,
    apiTimeoutMs: 30000, // read by api on every call
    auth: function () { return auth; }, setAuth: setAuth, isAdmin: isAdmin,
    route: route, navigate: navigate, render: render, setQuery: setQuery, toast: toast,
    page: '', pageState: null,
    onUnauthorized: null, showLogin: function () {},
  };
  root.AP = AP;
})(window);
