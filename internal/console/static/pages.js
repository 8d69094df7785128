// pages.js — the console's list pages: sessions (search, paged), the approvals inbox (pending
// first; decide with a reason), agents, tools and MCP servers (read-only) and usage. Each
// page's filters live in its query string, so a link to it opens the same view.
(function (root) {
  'use strict';

  var el = AP.el;

  // table builds a grid; rows are <tr>s, or a <tbody> the caller fills later
  // (used as it is, not wrapped in another).
  function table(headers, rows, attrs) {
    var body = rows && rows.tagName === 'TBODY' ? rows : el('tbody', {}, rows);
    return el('table', Object.assign({ class: 'grid' }, attrs || {}),
      el('thead', {}, el('tr', {}, headers.map(function (h) { return el('th', { text: h }); }))),
      body);
  }

  function td(v, attrs) {
    var c = el('td', attrs || {});
    if (v != null && typeof v === 'object') c.appendChild(v);
    else c.textContent = v == null || v === '' ? '—' : String(v);
    return c;
  }

  function errorLine(err) {
    return el('p', { class: 'error-box', role: 'alert', text: err.status === 404 ? 'Not found.' : 'Could not load: ' + err });
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

    function load(first) {
      if (first) {
        box.replaceChildren(el('table', { class: 'grid', 'data-testid': 'sessions' },
          el('thead', {}, el('tr', {}, ['Session', 'User', 'Status', 'Runs', 'Agents', 'Events', 'Created', 'Last event'].map(function (h) { return el('th', { text: h }); }))),
          tbody));
        tbody.replaceChildren();
        count = 0;
      }
      AP.api('/v1/sessions' + AP.query(Object.assign({}, filters, { cursor: cursor, limit: 50 }))).then(function (b) {
        if (stopped) return;
        b.sessions.forEach(function (s) {
          count++;
          tbody.appendChild(el('tr', { dataset: { sessionId: s.session_id } },
            td(AP.link('/console/sessions/' + encodeURIComponent(s.session_id), s.session_id, { class: 'mono' })),
            td(s.user_id), td(el('span', { class: 'badge ' + (s.status === 'active' ? 'info' : ''), text: s.status })),
            td(s.root_runs), td((s.agents || []).join(', ')), td(AP.fmtInt(s.last_seq)), td(AP.fmtTime(s.created_at)), td(AP.fmtTime(s.last_event_at))));
        });
        if (!count) tbody.appendChild(el('tr', {}, el('td', { colspan: '8', class: 'muted', text: 'No sessions match.' })));
        cursor = b.next_cursor;
        more.hidden = !cursor;
      }, function (err) { box.appendChild(errorLine(err)); });
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
    AP.pageState = function () { return { rows: count, more: !!cursor }; };
    return function () { stopped = true; };
  });

  // --- approvals ---

  AP.route('/console/approvals', 'approvals', function (view) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'Approvals' })));
    if (!AP.isAdmin()) page.appendChild(el('p', { class: 'muted', text: 'Your approvals, read only: decide them in the chat.' }));
    var pendingBox = el('div', { 'data-testid': 'pending' });
    var recentBody = el('tbody');
    var more = el('button', { type: 'button', class: 'btn btn-small', text: 'Load more', hidden: true });
    page.appendChild(el('h2', { text: 'Pending' }));
    page.appendChild(pendingBox);
    page.appendChild(el('h2', { text: 'Decided' }));
    page.appendChild(table(['Approval', 'Tool', 'Arguments', 'Outcome', 'Decided by', 'Reason', 'Decided', 'Session'], recentBody, { 'data-testid': 'decided' }));
    page.appendChild(more);
    var stopped = false;
    var cards = new Map(); // approval id → card (kept across refreshes so a typed reason survives)
    var pendingIds = [];
    var cursor = '';
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
        status.textContent = res.status.toLowerCase();
        c.dataset.state = res.status.toLowerCase();
        AP.toast('Approval ' + a.approval_id + ' ' + res.status.toLowerCase(), 'info');
        refresh();
      }, function (err) {
        status.textContent = 'refused — ' + err;
        c.dataset.state = 'refused';
        refresh();
      });
    }

    function tick() {
      cards.forEach(function (c) {
        var left = Math.max(0, Math.ceil((c.expiresAt - Date.now()) / 1000));
        c.expires.textContent = left > 0 ? 'expires in ' + (left >= 60 ? Math.floor(left / 60) + ' min ' + (left % 60) + ' s' : left + ' s') : 'expired';
      });
    }

    function refresh() {
      AP.allPages('/v1/approvals', { status: 'PENDING' }, 'approvals', 1000).then(function (list) {
        if (stopped) return;
        pendingIds = list.map(function (a) { return a.approval_id; });
        var keep = new Set(pendingIds);
        cards.forEach(function (c, id) {
          // A decided card stays until its outcome has been read.
          if (!keep.has(id) && !c.dataset.state) cards.delete(id);
          else if (!keep.has(id) && c.dataset.state) { c.dataset.done = '1'; }
        });
        list.forEach(function (a) { if (!cards.has(a.approval_id)) cards.set(a.approval_id, card(a)); });
        var order = list.map(function (a) { return cards.get(a.approval_id); });
        cards.forEach(function (c, id) { if (!keep.has(id)) order.push(c); });
        pendingBox.replaceChildren.apply(pendingBox, order.length ? order : [el('p', { class: 'muted', text: 'Nothing is waiting for a decision.' })]);
        tick();
      }, function (err) { pendingBox.replaceChildren(errorLine(err)); });
      loadDecided(true);
    }

    function loadDecided(first) {
      if (first) { cursor = ''; decidedCount = 0; }
      AP.api('/v1/approvals' + AP.query({ order: 'desc', limit: 50, cursor: cursor })).then(function (b) {
        if (stopped) return;
        if (first) recentBody.replaceChildren();
        b.approvals.forEach(function (a) {
          if (a.status === 'PENDING') return;
          decidedCount++;
          recentBody.appendChild(el('tr', { dataset: { approvalId: a.approval_id, status: a.status } },
            td(el('code', { text: a.approval_id })), td(a.tool_name), td(a.args_summary),
            td(el('span', { class: 'badge ' + AP.statusClass(a.status === 'APPROVED' ? 'DONE' : a.status === 'REJECTED' ? 'FAILED' : 'CANCELLED'), text: a.status })),
            td(a.decided_by), td(a.reason), td(AP.fmtTime(a.decided_at)),
            td(AP.link('/console/sessions/' + encodeURIComponent(a.session_id), a.session_id, { class: 'mono' }))));
        });
        cursor = b.next_cursor;
        more.hidden = !cursor;
      }, function () {});
    }

    more.addEventListener('click', function () { loadDecided(false); });
    refresh();
    var poll = root.setInterval(refresh, 5000);
    var ticker = root.setInterval(tick, 1000);
    AP.pageState = function () { return { pending: pendingIds.slice(), decided: decidedCount }; };
    return function () { stopped = true; root.clearInterval(poll); root.clearInterval(ticker); };
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
    AP.allPages('/v1/agents', {}, 'agents', 10000).then(function (list) {
      if (stopped) return;
      n = list.length;
      list.forEach(function (a) {
        var linked = el('span');
        (a.linked_agents || []).forEach(function (l, i) { if (i) linked.appendChild(document.createTextNode(', ')); linked.appendChild(el('code', { text: l })); });
        // A2A (DESIGN §12): agents registered with a2a:true serve their card publicly.
        var card = a.a2a ? el('a', { href: '/a2a/' + encodeURIComponent(a.agent_id) + '/.well-known/agent-card.json', target: '_blank', rel: 'noopener', text: 'agent card' }) : '—';
        tbody.appendChild(el('tr', { dataset: { agentId: a.agent_id, status: a.status } },
          td(el('code', { text: a.agent_id })), td(a.name), td(el('span', { class: 'badge ' + (a.status === 'healthy' ? 'good' : a.status === 'unhealthy' ? 'bad' : ''), text: a.status })),
          td(a.endpoint), td(linked), td((a.capabilities || []).join(', ')), td(card), td(AP.fmtTime(a.last_heartbeat_at)), td(AP.fmtTime(a.last_probe_at))));
      });
      if (!list.length) tbody.appendChild(el('tr', {}, el('td', { colspan: '9', class: 'muted', text: 'No agents registered.' })));
    }, function (err) { page.appendChild(errorLine(err)); });
    AP.pageState = function () { return { rows: n }; };
    return function () { stopped = true; };
  });

  // --- tools ---

  AP.route('/console/tools', 'tools', function (view) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'Tools' })));
    var tbody = el('tbody');
    page.appendChild(table(['Tool', 'Kind', 'Policy', 'Timeout', 'On failure', 'Agents', 'Description', 'Definition'], tbody, { 'data-testid': 'tools' }));
    var stopped = false;
    var n = 0;
    AP.allPages('/v1/tools', {}, 'tools', 10000).then(function (list) {
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
      if (!list.length) tbody.appendChild(el('tr', {}, el('td', { colspan: '8', class: 'muted', text: 'No tools registered.' })));
    }, function (err) { page.appendChild(errorLine(err)); });
    AP.pageState = function () { return { rows: n }; };
    return function () { stopped = true; };
  }, { admin: true });

  // --- MCP servers ---

  AP.route('/console/mcp', 'mcp', function (view) {
    var page = el('div', { class: 'page' });
    view.appendChild(page);
    page.appendChild(el('div', { class: 'page-head' }, el('h1', { text: 'MCP servers' })));
    var state = { status: 'loading', rows: 0 };
    var stopped = false;
    AP.api('/v1/mcp_servers').then(function (b) {
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
    }, function (err) {
      if (stopped) return;
      state = { status: err.status === 404 || err.status === 405 ? 'not_available' : 'error', rows: 0 };
      page.appendChild(el('p', { class: 'muted', 'data-testid': 'mcp-none', text: err.status === 404 || err.status === 405
        ? 'No MCP servers registered, or this server does not support them (GET /v1/mcp_servers is not available).'
        : 'Could not load the MCP servers: ' + err }));
    });
    AP.pageState = function () { return state; };
    return function () { stopped = true; };
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

    function show(ev) {
      if (ev) ev.preventDefault();
      var custom = period.value === 'custom';
      form.querySelectorAll('.custom').forEach(function (l) { l.hidden = !custom; });
      var p = { group_by: group.value };
      if (custom) {
        p.since = toMs(since.value);
        p.until = toMs(until.value);
      } else {
        var span = PERIODS.filter(function (x) { return x[0] === period.value; })[0];
        if (span && span[1]) p.since = String(Date.now() - span[1]);
        p.period = period.value;
      }
      AP.setQuery(p);
      var req = Object.assign({}, p);
      delete req.period;
      AP.api('/v1/usage' + AP.query(req)).then(function (b) {
        if (stopped) return;
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
      }, function (err) { box.replaceChildren(errorLine(err)); });
    }
    form.addEventListener('submit', show);
    period.addEventListener('change', show);
    group.addEventListener('change', show);
    show();
    AP.pageState = function () { return state; };
    return function () { stopped = true; };
  }, { admin: true });
})(window);
