// pages.js — the console's list pages: sessions (search, paged), the approvals inbox (pending
// first; decide with a reason), agents, tools and MCP servers (read-only) and usage. Each
// page's filters live in its query string, so a link to it opens the same view.
(function (root) {
  'use strict';

  var el = AP.el;

  // table builds a grid; rows are <tr>s, or a <tbody> the caller fills later
  // (used as it is, not wrapped in another). It comes in a box that scrolls sideways when the
  // grid is wider than the page (long ids, many columns) so the page itself never does.
  function table(headers, rows, attrs) {
    var body = rows && rows.tagName === 'TBODY' ? rows : el('tbody', {}, rows);
    return wrap(el('table', Object.assign({ class: 'grid' }, attrs || {}),
      el('thead', {}, el('tr', {}, headers.map(function (h) { return el('th', { text: h }); }))),
      body));
  }

  function wrap(t) {
    return el('div', { class: 'table-wrap' }, t);
  }

  // emptyRow is the one row of a grid with nothing to show.
  function emptyRow(cols, text) {
    return el('tr', { class: 'empty' }, el('td', { colspan: String(cols), class: 'muted', text: text }));
  }

  function td(v, attrs) {
    var c = el('td', attrs || {});
    if (v != null && typeof v === 'object') c.appendChild(v);
    else c.textContent = v == null || v === '' ? '—' : String(v);
    return c;
  }

  // timeCell shows a time that breaks, when the column is narrow, between the date and the
  // clock only (not at the date's hyphens).
  function timeCell(ms) {
    var t = AP.fmtTime(ms);
    var i = t.indexOf(' ');
    if (i < 0) return td(t);
    return el('td', {}, el('span', { class: 'nowrap', text: t.slice(0, i) }), ' ', el('span', { class: 'nowrap', text: t.slice(i + 1) }));
  }

  // toMs reads a datetime-local value ('' → '').
  function toMs(v) {
    if (!v) return '';
    var t = Date.parse(v);
    return isFinite(t) ? String(t) : '';
  }

  function toLocalInput(ms) {
    if (!ms) return '';
    var d = new Date(Number(ms));
    var pad = function (n) { return String(n).padStart(2, '0'); };
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + 'T' + pad(d.getHours()) + ':' + pad(d.getMinutes());
  }

  // --- sessions ---

  AP.route('/console/sessions', 'sessions', function (view, params, q) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'Sessions' })));
    var f = {
      q: el('input', { name: 'q', placeholder: 'session id prefix', value: q.get('q') || '', 'data-testid': 'filter-q' }),
      user_id: el('input', { name: 'user_id', placeholder: 'user', value: q.get('user_id') || '' }),
      agent_id: el('input', { name: 'agent_id', placeholder: 'agent', value: q.get('agent_id') || '' }),
      status: el('select', { name: 'status' }, [['', 'any status'], ['active', 'active'], ['ended', 'ended']].map(function (o) {
        return el('option', { value: o[0], selected: (q.get('status') || '') === o[0], text: o[1] });
      })),
      since: el('input', { type: 'datetime-local', name: 'since', value: toLocalInput(q.get('since')), 'aria-label': 'created since' }),
      until: el('input', { type: 'datetime-local', name: 'until', value: toLocalInput(q.get('until')), 'aria-label': 'created before' }),
    };
    if (!AP.isAdmin()) f.user_id.disabled = true;
    var form = el('form', { class: 'filters' }, f.q, f.user_id, f.agent_id, f.status,
      el('label', { class: 'muted' }, 'from ', f.since), el('label', { class: 'muted' }, 'to ', f.until),
      el('button', { type: 'submit', class: 'btn btn-small btn-primary', text: 'Search' }));
    page.appendChild(form);
    var tbody = el('tbody');
    var box = el('div');
    var more = el('button', { type: 'button', class: 'btn btn-small', text: 'Load more', hidden: true, 'data-testid': 'load-more' });
    page.appendChild(box);
    page.appendChild(more);
    var cursor = '';
    var filters = {};
    var count = 0;
    var stopped = false;
    var loader = null; // the load under way (a search, or Load more), tried until it succeeds
    var gen = 0; // which load is the latest: an older one's answer is not drawn

    function load(first) {
      if (loader) { loader.stop(); loader.note.remove(); }
      if (first) {
        box.replaceChildren(table(['Session', 'User', 'Status', 'Runs', 'Agents', 'Events', 'Created', 'Last event'], tbody, { 'data-testid': 'sessions' }));
        tbody.replaceChildren();
        count = 0;
      }
      var mine = ++gen;
      loader = AP.keepLoading(function () {
        return AP.api('/v1/sessions' + AP.query(Object.assign({}, filters, { cursor: cursor, limit: 50 }))).then(function (b) { draw(b, mine); });
      });
      box.appendChild(loader.note);
    }

    function draw(b, mine) {
      if (stopped || mine !== gen) return;
      b.sessions.forEach(function (s) {
        count++;
        tbody.appendChild(el('tr', { dataset: { sessionId: s.session_id } },
          td(AP.link('/console/sessions/' + encodeURIComponent(s.session_id), s.session_id, { class: 'mono' })),
          td(s.user_id), td(el('span', { class: 'badge ' + (s.status === 'active' ? 'info' : ''), text: s.status })),
          td(s.root_runs), td((s.agents || []).join(', ')), td(AP.fmtInt(s.last_seq)), timeCell(s.created_at), timeCell(s.last_event_at)));
      });
      if (!count) tbody.appendChild(emptyRow(8, 'No sessions match.'));
      cursor = b.next_cursor;
      more.hidden = !cursor;
    }

    function search(ev) {
      if (ev) ev.preventDefault();
      filters = { q: f.q.value.trim(), user_id: AP.isAdmin() ? f.user_id.value.trim() : '', agent_id: f.agent_id.value.trim(), status: f.status.value, since: toMs(f.since.value), until: toMs(f.until.value) };
      AP.setQuery(filters);
      cursor = '';
      load(true);
    }
    form.addEventListener('submit', search);
    more.addEventListener('click', function () { load(false); });
    search();
    AP.pageState = function () { return { rows: count, more: !!cursor, load: loader.note.dataset.state }; };
    return function () { stopped = true; loader.stop(); };
  });

  // --- approvals ---

  AP.route('/console/approvals', 'approvals', function (view) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'Approvals' })));
    if (!AP.isAdmin()) page.appendChild(el('p', { class: 'muted', text: 'Your approvals, read only: decide them in the chat.' }));
    var pendingBox = el('div', { 'data-testid': 'pending' });
    var recentBody = el('tbody');
    var more = el('button', { type: 'button', class: 'btn btn-small', text: 'Load more', hidden: true, 'data-testid': 'load-more' });
    var loader = null;
    var pendingHead = el('h2', { text: 'Pending' });
    page.appendChild(pendingHead);
    page.appendChild(pendingBox);
    page.appendChild(el('h2', { text: 'Decided' }));
    page.appendChild(table(['Approval', 'Tool', 'Arguments', 'Outcome', 'Decided by', 'Reason', 'Decided', 'Session'], recentBody, { 'data-testid': 'decided' }));
    page.appendChild(more);
    var stopped = false;
    var cards = new Map(); // approval id → card (kept across refreshes so a typed reason survives)
    var pendingIds = [];
    var DECIDED_PAGE = 50;
    var listed = []; // what the Decided table shows, as listed (newest first, pending ones too)
    var cursor = ''; // where Load more reads on: just after the last of listed
    var wantMore = false; // Load more was clicked: the next load reads a page further
    var decidedCount = 0;

    function card(a) {
      var reason = el('input', { type: 'text', class: 'reason', placeholder: 'Reason', maxlength: '500', 'aria-label': 'Reason for the decision', 'data-testid': 'approval-reason' });
      var status = el('div', { class: 'status' });
      var buttons = ['approve', 'reject'].map(function (d) {
        return el('button', { type: 'button', class: 'btn btn-small ' + (d === 'approve' ? 'btn-primary' : 'btn-danger'), 'data-testid': d + '-button', text: d === 'approve' ? 'Approve' : 'Reject',
          onclick: function () { decide(a, d, reason.value, c, status); } });
      });
      var expires = el('span', { class: 'countdown' });
      var c = el('div', { class: 'approval-card', 'data-testid': 'approval', dataset: { approvalId: a.approval_id } },
        el('div', { class: 'approval-head' }, el('strong', { text: a.tool_name }), ' ', el('code', { class: 'muted', text: a.approval_id })),
        el('div', { class: 'args', text: a.args_summary }),
        el('div', { class: 'muted' }, 'session ', AP.link('/console/sessions/' + encodeURIComponent(a.session_id), a.session_id, { class: 'mono' }),
          ' · run ', el('code', { text: a.run_id }), ' · asked ', AP.fmtTime(a.created_at), ' · ', expires),
        AP.isAdmin() ? el('div', { class: 'actions' }, reason, buttons) : null,
        status);
      c.expiresAt = a.expires_at;
      c.expires = expires;
      return c;
    }

    function decide(a, decision, reason, c, status) {
      c.querySelectorAll('button, input').forEach(function (b) { b.disabled = true; });
      status.textContent = decision === 'approve' ? 'approving…' : 'rejecting…';
      AP.api('/v1/approvals/' + encodeURIComponent(a.approval_id) + ':decide', { method: 'POST', body: { decision: decision, reason: reason.trim() } }).then(function (res) {
        // Decided: the card leaves Pending at the refresh; the Decided table lists it.
        AP.toast('Approval ' + a.approval_id + ' ' + res.status.toLowerCase(), 'info');
        loader.now();
      }, function (err) {
        // Refused (someone decided first, it expired, the server is gone): say so on the card;
        // the refresh drops it if it is no longer pending, or offers it again.
        status.textContent = 'refused — ' + err;
        AP.toast('Approval ' + a.approval_id + ': decision refused — ' + err, 'error');
        c.querySelectorAll('button, input').forEach(function (b) { b.disabled = false; });
        loader.now();
      });
    }

    function tick() {
      cards.forEach(function (c) {
        var left = Math.max(0, Math.ceil((c.expiresAt - Date.now()) / 1000));
        c.expires.textContent = left > 0 ? 'expires in ' + (left >= 60 ? Math.floor(left / 60) + ' min ' + (left % 60) + ' s' : left + ' s') : 'expired';
      });
    }

    // refresh reads both lists; it settles once both are drawn, or fails if either failed.
    function refresh() {
      var pending = AP.allPages('/v1/approvals', { status: 'PENDING' }, 'approvals', 1000).then(function (list) {
        if (stopped) return;
        pendingIds = list.map(function (a) { return a.approval_id; });
        var keep = new Set(pendingIds);
        // Decided (here or anywhere else) or expired: no longer pending, so off the list.
        cards.forEach(function (c, id) { if (!keep.has(id)) cards.delete(id); });
        list.forEach(function (a) { if (!cards.has(a.approval_id)) cards.set(a.approval_id, card(a)); });
        var order = list.map(function (a) { return cards.get(a.approval_id); });
        pendingBox.replaceChildren.apply(pendingBox, order.length ? order : [el('p', { class: 'muted', 'data-testid': 'pending-none', text: 'Nothing is waiting for a decision.' })]);
        tick();
      });
      return Promise.all([pending, loadDecided()]);
    }

    function listApprovals(from, limit) {
      return AP.api('/v1/approvals' + AP.query({ order: 'desc', limit: limit, cursor: from })).then(function (b) {
        return { list: (b && b.approvals) || [], next: (b && b.next_cursor) || '' };
      });
    }

    // readHead reads the listing again from the newest down to the oldest approval shown, not
    // just its first page: that dropped, at every refresh, what Load more had added. The cursor
    // after that approval still points just after it (a keyset: created_at, id), so Load more
    // goes on from there; if it is gone (retention deleted it), what was read stands instead.
    function readHead() {
      var anchor = listed.length ? listed[listed.length - 1].approval_id : '';
      var limit = Math.min(1000, Math.max(DECIDED_PAGE, listed.length));
      var out = [];
      function next(from) {
        return listApprovals(from, limit).then(function (b) {
          for (var i = 0; i < b.list.length; i++) {
            out.push(b.list[i]);
            if (anchor && b.list[i].approval_id === anchor) return { list: out, next: cursor };
          }
          if (anchor && b.next && out.length < listed.length + 1000) return next(b.next);
          return { list: out, next: b.next };
        });
      }
      return next('');
    }

    // loadDecided redraws the Decided table from the head of the listing and, after a click on
    // Load more, the page after it. Load more goes through the refresh's loader, so the two
    // never race and a failed Load more is tried again like a refresh.
    function loadDecided() {
      var andMore = wantMore;
      wantMore = false;
      return readHead().then(function (head) {
        if (!andMore || !head.next) return head;
        return listApprovals(head.next, DECIDED_PAGE).then(function (b) { return { list: head.list.concat(b.list), next: b.next }; });
      }).then(function (r) {
        if (stopped) return;
        listed = r.list;
        cursor = r.next;
        drawDecided();
      }, function (err) {
        if (andMore) wantMore = true;
        throw err;
      });
    }

    function drawDecided() {
      var rows = listed.filter(function (a) { return a.status !== 'PENDING'; }).map(function (a) {
        return el('tr', { dataset: { approvalId: a.approval_id, status: a.status } },
          td(el('code', { text: a.approval_id })), td(a.tool_name), td(a.args_summary, { class: 'break' }),
          td(el('span', { class: 'badge ' + AP.statusClass(a.status === 'APPROVED' ? 'DONE' : a.status === 'REJECTED' ? 'FAILED' : 'CANCELLED'), text: a.status })),
          td(a.decided_by), td(a.reason, { class: 'break' }), timeCell(a.decided_at),
          td(AP.link('/console/sessions/' + encodeURIComponent(a.session_id), a.session_id, { class: 'mono' })));
      });
      decidedCount = rows.length;
      recentBody.replaceChildren.apply(recentBody, rows.length ? rows : [emptyRow(8, AP.isAdmin() ? 'No approval has been decided yet.' : 'None of your approvals has been decided yet.')]);
      more.hidden = !cursor;
    }

    more.addEventListener('click', function () {
      wantMore = true;
      loader.now();
    });
    // Polled every 5 s, one refresh at a time; while the server cannot be reached, retried with
    // the backoff of keepLoading, the cards and table as they were last read.
    loader = AP.keepLoading(refresh, { every: 5000 });
    page.insertBefore(loader.note, pendingHead);
    var ticker = root.setInterval(tick, 1000);
    AP.pageState = function () { return { pending: pendingIds.slice(), decided: decidedCount, load: loader.note.dataset.state }; };
    return function () { stopped = true; loader.stop(); root.clearInterval(ticker); };
  });

  // --- agents ---

  AP.route('/console/agents', 'agents', function (view) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'Agents' })));
    var tbody = el('tbody');
    page.appendChild(table(['Agent', 'Name', 'Health', 'Endpoint', 'Linked agents', 'Capabilities', 'A2A', 'Last heartbeat', 'Last probe'], tbody, { 'data-testid': 'agents' }));
    var stopped = false;
    var n = 0;
    var loader = AP.keepLoading(function () {
      return AP.allPages('/v1/agents', {}, 'agents', 10000).then(draw);
    });
    page.appendChild(loader.note);

    function draw(list) {
      if (stopped) return;
      n = list.length;
      list.forEach(function (a) {
        var linked = el('span');
        (a.linked_agents || []).forEach(function (l, i) { if (i) linked.appendChild(document.createTextNode(', ')); linked.appendChild(el('code', { text: l })); });
        tbody.appendChild(el('tr', { dataset: { agentId: a.agent_id, status: a.status } },
          td(el('code', { text: a.agent_id })), td(a.name), td(el('span', { class: 'badge ' + (a.status === 'healthy' ? 'good' : a.status === 'unhealthy' ? 'bad' : ''), text: a.status })),
          td(a.endpoint, { class: 'break' }), td(linked), td((a.capabilities || []).join(', ')), a2aCell(a), timeCell(a.last_heartbeat_at), timeCell(a.last_probe_at)));
      });
      if (!list.length) tbody.appendChild(emptyRow(9, 'No agents registered.'));
    }
    AP.pageState = function () { return { rows: n, load: loader.note.dataset.state }; };
    return function () { stopped = true; loader.stop(); };
  });

  // a2aCell says how an agent takes part in A2A (DESIGN §12): served here (a2a: true; its card
  // is public under /a2a/{id}), and/or a remote A2A agent (protocol "a2a"): the card stored at
  // its registration — name, skills — and where that card is.
  function a2aCell(a) {
    var c = el('td', { 'data-testid': 'a2a' });
    if (a.a2a) {
      c.dataset.a2a = 'served';
      c.appendChild(el('div', {}, el('a', { href: '/a2a/' + encodeURIComponent(a.agent_id) + '/.well-known/agent-card.json', target: '_blank', rel: 'noopener', text: 'agent card' }), ' (served here)'));
    }
    if (a.protocol === 'a2a') {
      c.dataset.a2a = 'remote';
      var box = el('div', { class: 'a2a-remote' }, el('span', { class: 'badge info', text: 'remote A2A agent' }));
      c.appendChild(box);
      var show = function (card) {
        if (!card || typeof card !== 'object') {
          box.appendChild(el('div', { class: 'muted', text: 'no card stored' }));
          return;
        }
        var skills = Array.isArray(card.skills) ? card.skills.map(function (k) { return k && (k.name || k.id); }).filter(Boolean) : [];
        box.appendChild(el('div', { class: 'a2a-name' }, el('strong', { text: card.name || '(no name)' }), card.version ? el('span', { class: 'muted', text: ' v' + card.version }) : null));
        if (card.description) box.title = card.description;
        if (skills.length) box.appendChild(el('div', { class: 'a2a-skills' }, el('span', { class: 'muted', text: 'skills: ' }), skills.join(', ')));
        var href = cardURL(a.endpoint);
        if (href) box.appendChild(el('div', {}, el('a', { href: href, target: '_blank', rel: 'noopener noreferrer', 'data-testid': 'a2a-card-link', text: 'its card' })));
      };
      // The list carries the card; an older server's may not, so ask for the agent itself then.
      if (a.a2a_card) show(a.a2a_card);
      else AP.api('/v1/agents/' + encodeURIComponent(a.agent_id)).then(function (full) { show(full && full.a2a_card); }, function () { show(null); });
    }
    if (!c.firstChild) c.textContent = '—';
    return c;
  }

  // cardURL is where a remote A2A agent's card is: its endpoint when that names the card, else
  // the well-known path under it (docs/API.md, remote A2A agents). Only http(s) URLs are links.
  function cardURL(endpoint) {
    if (typeof endpoint !== 'string' || !/^https?:\/\//i.test(endpoint)) return '';
    if (/\/\.well-known\//.test(endpoint) || /\.json$/i.test(endpoint)) return endpoint;
    return endpoint.replace(/\/+$/, '') + '/.well-known/agent-card.json';
  }

  // --- tools ---

  AP.route('/console/tools', 'tools', function (view) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'Tools' })));
    var tbody = el('tbody');
    page.appendChild(table(['Tool', 'Kind', 'Policy', 'Timeout', 'On failure', 'Agents', 'Description', 'Definition'], tbody, { 'data-testid': 'tools' }));
    var stopped = false;
    var n = 0;
    var loader = AP.keepLoading(function () {
      return AP.allPages('/v1/tools', {}, 'tools', 10000).then(draw);
    });
    page.appendChild(loader.note);

    function draw(list) {
      if (stopped) return;
      n = list.length;
      list.forEach(function (t) {
        var pol = t.policy || {};
        var rules = (pol.rules || []).map(function (r) { return (r.name || 'rule') + ': ' + r.when + ' → ' + r.decision; }).join('; ');
        tbody.appendChild(el('tr', { dataset: { tool: t.tool_name } },
          td(el('code', { text: t.tool_name })), td(t.kind), td(pol.decision + (rules ? ' (' + rules + ')' : '')), td(AP.fmtDuration(t.timeout_ms)),
          td(t.on_failure), td((t.agents || []).join(', ') || 'all'), td(t.description),
          td(el('details', {}, el('summary', { text: 'JSON' }), el('pre', { class: 'json', text: AP.pretty(t) })))));
      });
      if (!list.length) tbody.appendChild(emptyRow(8, 'No tools registered.'));
    }
    AP.pageState = function () { return { rows: n, load: loader.note.dataset.state }; };
    return function () { stopped = true; loader.stop(); };
  }, { admin: true });

  // --- MCP servers ---

  AP.route('/console/mcp', 'mcp', function (view) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'MCP servers' })));
    var state = { status: 'loading', rows: 0 };
    var stopped = false;
    var loader = AP.keepLoading(function () {
      return AP.api('/v1/mcp_servers').then(draw, function (err) {
        if (stopped) return;
        if (err.status !== 404 && err.status !== 405) {
          state = { status: 'error', rows: 0 };
          throw err;
        }
        state = { status: 'not_available', rows: 0 };
        page.appendChild(el('p', { class: 'muted', 'data-testid': 'mcp-none', text: 'No MCP servers registered, or this server does not support them (GET /v1/mcp_servers is not available).' }));
      });
    }, { message: function (err) { return 'Could not load the MCP servers: ' + err; } });
    page.appendChild(loader.note);

    function draw(b) {
      if (stopped) return;
      var list = (b && (b.mcp_servers || b.servers)) || [];
      state = { status: 'ok', rows: list.length };
      if (!list.length) {
        page.appendChild(el('p', { class: 'muted', 'data-testid': 'mcp-none', text: 'No MCP servers registered.' }));
        return;
      }
      var tbody = el('tbody');
      list.forEach(function (s) {
        tbody.appendChild(el('tr', { dataset: { name: s.name } },
          td(el('code', { text: s.name })), td(s.transport), td(s.url || s.command), td(el('span', { class: 'badge ' + (s.status === 'connected' ? 'good' : s.status ? 'warn' : ''), text: s.status || '—' })),
          td(s.tool_count != null ? s.tool_count : s.tools ? s.tools.length : ''), td(el('details', {}, el('summary', { text: 'JSON' }), el('pre', { class: 'json', text: AP.pretty(s) })))));
      });
      page.appendChild(table(['Server', 'Transport', 'Where', 'Status', 'Tools', 'Details'], tbody, { 'data-testid': 'mcp' }));
    }
    AP.pageState = function () { return Object.assign({ load: loader.note.dataset.state }, state); };
    return function () { stopped = true; loader.stop(); };
  }, { admin: true });

  // --- usage ---

  var PERIODS = [['24h', 864e5], ['7d', 7 * 864e5], ['30d', 30 * 864e5], ['all', 0]];

  AP.route('/console/usage', 'usage', function (view, params, q) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'Usage and cost' })));
    var period = el('select', { name: 'period', 'data-testid': 'usage-period' }, PERIODS.concat([['custom', -1]]).map(function (p) {
      return el('option', { value: p[0], text: p[0] === 'all' ? 'all time' : p[0] === 'custom' ? 'custom…' : 'last ' + p[0] });
    }));
    var since = el('input', { type: 'datetime-local', 'aria-label': 'since' });
    var until = el('input', { type: 'datetime-local', 'aria-label': 'until' });
    var group = el('select', { name: 'group_by', 'data-testid': 'usage-group' }, ['agent', 'model', 'user'].map(function (g) { return el('option', { value: g, text: 'by ' + g }); }));
    period.value = q.get('period') || (q.get('since') ? 'custom' : '24h');
    group.value = q.get('group_by') || 'agent';
    since.value = toLocalInput(q.get('since'));
    until.value = toLocalInput(q.get('until'));
    var form = el('form', { class: 'filters' }, group, period, el('label', { class: 'muted custom' }, 'from ', since), el('label', { class: 'muted custom' }, 'to ', until),
      el('button', { type: 'submit', class: 'btn btn-small btn-primary', text: 'Show' }));
    page.appendChild(form);
    var box = el('div');
    page.appendChild(box);
    var state = { rows: [], total: null };
    var stopped = false;
    var loader = null; // the current view's load, tried until it succeeds
    var gen = 0;

    // filters are the form's choices as query parameters; a period's start is counted from now.
    function filters() {
      var p = { group_by: group.value };
      if (period.value === 'custom') {
        p.since = toMs(since.value);
        p.until = toMs(until.value);
      } else {
        var span = PERIODS.filter(function (x) { return x[0] === period.value; })[0];
        if (span && span[1]) p.since = String(Date.now() - span[1]);
        p.period = period.value;
      }
      return p;
    }

    function show(ev) {
      if (ev) ev.preventDefault();
      form.querySelectorAll('.custom').forEach(function (l) { l.hidden = period.value !== 'custom'; });
      AP.setQuery(filters());
      if (loader) { loader.stop(); loader.note.remove(); }
      var mine = ++gen;
      loader = AP.keepLoading(function () {
        var req = filters(); // afresh on a retry: "the last 24 h" is counted from then
        delete req.period;
        return AP.api('/v1/usage' + AP.query(req)).then(function (b) { draw(b, mine); });
      }, {
        // What was shown was for other choices: not left standing as if it answered these.
        onError: function () { state = { rows: [], total: null }; box.replaceChildren(); },
      });
      page.insertBefore(loader.note, box);
    }

    function draw(b, mine) {
      if (stopped || mine !== gen) return;
      state = { rows: b.rows, total: b.total, groupBy: b.group_by };
      var rows = b.rows.slice().sort(function (x, y) { return y.estimated_cost - x.estimated_cost || y.total_tokens - x.total_tokens; });
      function line(r, label) {
        return el('tr', { dataset: { key: r.key } }, td(label), td(AP.fmtInt(r.llm_calls)), td(AP.fmtInt(r.prompt_tokens)), td(AP.fmtInt(r.cached_tokens)),
          td(AP.fmtInt(r.completion_tokens)), td(AP.fmtInt(r.reasoning_tokens)), td(AP.fmtInt(r.total_tokens)), td(AP.fmtCost(r.estimated_cost)));
      }
      var lines = rows.map(function (r) { return line(r, r.key || '(none)'); });
      var tot = line(b.total, 'total');
      tot.className = 'total';
      lines.push(tot);
      var parts = [table([b.group_by, 'LLM calls', 'prompt', 'cached', 'completion', 'reasoning', 'tokens', 'estimated cost'], lines, { 'data-testid': 'usage' })];
      // replaceChildren writes a null as the text "null": add the note only when there is one.
      if (!rows.length) parts.push(el('p', { class: 'muted', text: 'No LLM calls in this period.' }));
      box.replaceChildren.apply(box, parts);
    }
    form.addEventListener('submit', show);
    period.addEventListener('change', show);
    group.addEventListener('change', show);
    show();
    AP.pageState = function () { return Object.assign({ load: loader.note.dataset.state }, state); };
    return function () { stopped = true; loader.stop(); };
  }, { admin: true });
})(window);
