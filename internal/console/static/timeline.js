// timeline.js — a session's run tree as a timeline. Model folds the event log (DESIGN.md §9) into
// rows — run headers, LLM calls, tool calls with their policy and approval, states, the agent's
// output, input requests, sub-agent calls, run ends — nested by run (parent_run_id), each row
// keeping the events it was made of. It touches no DOM, so testdata/timeline_test.js drives it
// in node. View renders a Model as a windowed list: only the rows scrolled to are in the DOM, so
// a session of 100 000 events opens as fast as one of 100.
(function (root) {
  'use strict';

  // Types of the run statuses a platform state may announce.
  var RUN_STATES = { RUNNING: 1, PAUSED_WAITING_APPROVAL: 1, PAUSED_WAITING_TOOL: 1, QUEUED: 1 };
  var SUBAGENT_TYPES = { agent_called_child: 1, sub_agent_call_start: 1, sub_agent_partial: 1, sub_agent_complete: 1, sub_agent_error: 1 };

  function Model() {
    this.rows = [];
    this.byKey = new Map(); // 'tool:<id>', 'llm:<call_id>' → row
    this.runs = new Map(); // run_id → run
    this.runOrder = [];
    this.lastSeq = 0;
    this.firstTs = 0;
    this.lastTs = 0;
    this.events = 0;
    this.dirty = new Set(); // rows changed since the view last looked
  }

  // add applies events in seq order; an event at or below the last seq seen is skipped, so
  // overlapping pages or a resumed stream never double a row.
  Model.prototype.add = function (events) {
    for (var i = 0; i < events.length; i++) {
      var e = events[i];
      if (typeof e.seq === 'number') {
        if (e.seq <= this.lastSeq) continue;
        this.lastSeq = e.seq;
      }
      this.events++;
      if (!this.firstTs) this.firstTs = e.ts;
      this.lastTs = e.ts;
      this.apply(e);
    }
  };

  // run returns the run of an event, known from its first event: a run whose parent is known
  // sits one level below it.
  Model.prototype.run = function (e) {
    var id = e.run_id || '';
    var r = this.runs.get(id);
    if (r) return r;
    var parent = e.parent_run_id ? this.runs.get(e.parent_run_id) : null;
    r = {
      runId: id, parentRunId: e.parent_run_id || '', depth: e.parent_run_id ? (parent ? parent.depth + 1 : 1) : 0,
      agentId: '', status: id ? 'RUNNING' : '', startedAt: e.ts, endedAt: 0, header: null, lastRow: null,
      llmCalls: 0, promptTokens: 0, completionTokens: 0, cost: 0, toolCalls: 0, error: null,
    };
    this.runs.set(id, r);
    this.runOrder.push(r);
    return r;
  };

  Model.prototype.row = function (kind, r, e, key) {
    var row = { id: this.rows.length, kind: kind, runId: r.runId, depth: r.depth, ts: e.ts, seq: e.seq, events: [], data: {} };
    this.rows.push(row);
    if (key) this.byKey.set(key, row);
    r.lastRow = row;
    return row;
  };

  Model.prototype.keyed = function (kind, key, r, e) {
    var row = this.byKey.get(key);
    if (!row) row = this.row(kind, r, e, key);
    return row;
  };

  Model.prototype.touch = function (row, e) {
    if (e) row.events.push(e);
    this.dirty.add(row);
    return row;
  };

  Model.prototype.header = function (r, e) {
    if (!r.header) {
      r.header = this.row('run', r, e, '');
      r.header.data = { parentRunId: r.parentRunId };
    }
    return r.header;
  };

  function content(msg) {
    if (!msg) return '';
    var c = msg.content;
    if (typeof c === 'string') return c;
    if (Array.isArray(c)) return c.map(function (p) { return typeof p === 'string' ? p : (p && p.text) || ''; }).join('');
    return c == null ? '' : JSON.stringify(c);
  }

  Model.prototype.apply = function (e) {
    var p = e.payload || {};
    var r = this.run(e);
    var row;
    switch (e.type) {
      case 'user_input':
        row = this.header(r, e);
        row.data.input = content(p.message);
        this.touch(row, e);
        return;
      case 'run_started':
        row = this.header(r, e);
        r.agentId = p.agent_id || r.agentId;
        row.data.agentId = r.agentId;
        if (p.message) row.data.input = content(p.message);
        row.data.requestId = p.request_id || '';
        this.touch(row, e);
        return;
      case 'agent_invoke_started':
        row = this.header(r, e);
        r.agentId = r.agentId || p.agent_id || '';
        row.data.agentId = r.agentId;
        row.data.endpoint = p.endpoint || '';
        this.touch(row, e);
        return;
      case 'agent_invoke_done':
        row = this.header(r, e);
        row.data.invokeMs = p.duration_ms;
        this.touch(row, e);
        return;
      case 'agent_stream_delta':
        // Consecutive deltas of a run are one output row; their events are fetched again
        // when someone opens the row's JSON rather than kept (they are most of a long log).
        row = r.lastRow && r.lastRow.kind === 'output' ? r.lastRow : this.row('output', r, e, '');
        if (!row.data.count) row.data = { text: '', count: 0, firstSeq: e.seq, lastSeq: e.seq };
        if (row.data.text.length < 20000) row.data.text += typeof p.text === 'string' ? p.text : '';
        row.data.count++;
        row.data.lastSeq = e.seq;
        row.data.lastTs = e.ts;
        this.touch(row, null);
        return;
      case 'state':
        if (p.source !== 'agent' && p.state === 'INPUT_REQUIRED') {
          row = this.row('input_required', r, e, '');
          row.data = { question: (p.detail && (p.detail.question || p.detail)) || '' };
        } else {
          row = this.row('state', r, e, '');
          row.data = { state: p.state, detail: p.detail, source: p.source || '' };
          if (p.source === 'platform' && RUN_STATES[p.state]) r.status = p.state;
        }
        this.touch(row, e);
        if (r.header) this.dirty.add(r.header);
        return;
      case 'input_required':
        row = this.row('input_required', r, e, '');
        row.data = { question: p.question || '', detail: p.detail };
        r.status = 'INPUT_REQUIRED';
        this.touch(row, e);
        return;
      case 'llm_call_started':
        row = this.keyed('llm', 'llm:' + p.call_id, r, e);
        row.data.model = p.model;
        row.data.endpoint = p.endpoint;
        row.data.stream = !!p.stream;
        if (!row.data.done) row.data.pending = true;
        this.touch(row, e);
        return;
      case 'llm_call_done':
        row = this.keyed('llm', 'llm:' + p.call_id, r, e);
        Object.assign(row.data, {
          model: p.model, upstreamModel: p.upstream_model || '', endpoint: p.endpoint, stream: !!p.stream, pending: false, done: true,
          outcome: p.outcome, status: p.status, promptTokens: p.prompt_tokens || 0, completionTokens: p.completion_tokens || 0,
          cachedTokens: p.cached_tokens || 0, reasoningTokens: p.reasoning_tokens || 0, totalTokens: p.total_tokens || 0,
          cost: p.estimated_cost || 0, ttftMs: p.ttft_ms, latencyMs: p.latency_ms, overheadMs: p.proxy_overhead_ms,
          partial: !!p.partial, error: p.error || null, attempts: p.attempts,
        });
        r.llmCalls++;
        r.promptTokens += p.prompt_tokens || 0;
        r.completionTokens += p.completion_tokens || 0;
        r.cost += p.estimated_cost || 0;
        this.touch(row, e);
        if (r.header) this.dirty.add(r.header);
        return;
      case 'tool_call_created':
        row = this.keyed('tool', 'tool:' + p.tool_call_id, r, e);
        Object.assign(row.data, { toolCallId: p.tool_call_id, toolName: p.tool_name, kind: p.kind, args: p.args, state: row.data.state || 'CREATED', timeoutMs: p.timeout_ms });
        r.toolCalls++;
        this.touch(row, e);
        return;
      case 'policy_decision':
        row = this.keyed('tool', 'tool:' + p.tool_call_id, r, e);
        row.data.toolName = row.data.toolName || p.tool_name;
        row.data.policy = { decision: p.decision, rule: p.rule || '', expr: p.expr || '' };
        this.touch(row, e);
        return;
      case 'approval_created':
        row = this.keyed('tool', 'tool:' + p.tool_call_id, r, e);
        row.data.toolName = row.data.toolName || p.tool_name;
        row.data.approval = { approvalId: p.approval_id, argsSummary: p.args_summary, expiresAt: p.expires_at, requestedAt: e.ts, outcome: 'pending' };
        row.data.state = 'WAITING_APPROVAL';
        this.touch(row, e);
        return;
      case 'approval_decision':
        row = this.keyed('tool', 'tool:' + p.tool_call_id, r, e);
        row.data.approval = Object.assign(row.data.approval || { approvalId: p.approval_id }, {
          outcome: p.decision, decidedBy: p.decided_by || '', reason: p.reason || '', waitedMs: p.waited_ms, decidedAt: p.decided_at,
        });
        this.touch(row, e);
        return;
      case 'tool_dispatched':
        row = this.keyed('tool', 'tool:' + p.tool_call_id, r, e);
        row.data.toolName = row.data.toolName || p.tool_name;
        row.data.state = 'DISPATCHED';
        row.data.kind = row.data.kind || p.kind;
        this.touch(row, e);
        return;
      case 'tool_request':
        row = this.keyed('tool', 'tool:' + p.tool_call_id, r, e);
        row.data.toolName = row.data.toolName || p.tool_name;
        row.data.state = 'WAITING_CLIENT';
        if (row.data.args === undefined) row.data.args = p.args;
        this.touch(row, e);
        return;
      case 'tool_result':
        row = this.keyed('tool', 'tool:' + p.tool_call_id, r, e);
        Object.assign(row.data, {
          toolName: row.data.toolName || p.tool_name, state: p.state, status: p.status, durationMs: p.duration_ms, execMs: p.exec_ms,
          result: p.result, error: p.error || null, ended: true,
        });
        this.touch(row, e);
        return;
      case 'run_done':
      case 'run_failed':
      case 'run_cancelled':
        r.status = e.type === 'run_done' ? 'DONE' : e.type === 'run_failed' ? 'FAILED' : 'CANCELLED';
        r.endedAt = e.ts;
        if (e.type === 'run_failed') r.error = { code: p.code, message: p.message, toolCallId: p.tool_call_id || '' };
        row = this.row('end', r, e, '');
        row.data = { status: r.status, usage: p.usage, totalCost: p.total_cost, llmCalls: p.llm_calls, code: p.code || '', message: p.message || '', detail: p.detail };
        this.touch(row, e);
        if (r.header) this.dirty.add(r.header);
        return;
    }
    if (SUBAGENT_TYPES[e.type]) {
      row = this.row('subagent', r, e, '');
      row.data = { type: e.type, agentId: p.agent_id || '', childRunId: p.child_run_id || p.run_id || '', text: p.input_summary || p.text || p.output || '', code: p.code || '', message: p.message || '', usage: p.usage, durationMs: p.duration_ms };
      this.touch(row, e);
      return;
    }
    row = this.row('event', r, e, '');
    row.data = { type: e.type };
    this.touch(row, e);
  };

  // summary is what tests (window.agentplaneConsole) and the runs panel read.
  Model.prototype.summary = function () {
    var counts = {};
    this.rows.forEach(function (row) { counts[row.kind] = (counts[row.kind] || 0) + 1; });
    return {
      lastSeq: this.lastSeq, events: this.events, rows: this.rows.length, counts: counts,
      runs: this.runOrder.filter(function (r) { return r.runId; }).map(function (r) {
        return { runId: r.runId, parentRunId: r.parentRunId, depth: r.depth, agentId: r.agentId, status: r.status, llmCalls: r.llmCalls, cost: r.cost, toolCalls: r.toolCalls };
      }),
      llm: this.rows.filter(function (row) { return row.kind === 'llm'; }).map(function (row) {
        var d = row.data;
        return { runId: row.runId, model: d.model, promptTokens: d.promptTokens, completionTokens: d.completionTokens, cachedTokens: d.cachedTokens,
          reasoningTokens: d.reasoningTokens, cost: d.cost, ttftMs: d.ttftMs, latencyMs: d.latencyMs, done: !!d.done };
      }),
      tools: this.rows.filter(function (row) { return row.kind === 'tool'; }).map(function (row) {
        var d = row.data;
        return { runId: row.runId, toolCallId: d.toolCallId, toolName: d.toolName, state: d.state, policy: d.policy || null,
          approval: d.approval || null, durationMs: d.durationMs, error: d.error || null };
      }),
    };
  };

  // --- rendering (browser only) ---

  var WINDOW_STEP = 150;

  // View renders model into container, WINDOW_STEP rows at a time as the reader scrolls. opts:
  //   needMore()   called when every loaded row is on screen and the reader is at the end
  //   sessionId    for fetching the events of an output row when its JSON is opened
  //   follow()     whether new rows at the end should appear at once (live, at the bottom)
  function View(container, model, opts) {
    this.model = model;
    this.opts = opts || {};
    this.box = AP.el('div', { class: 'timeline', 'data-testid': 'timeline' });
    this.sentinel = AP.el('div', { class: 'tl-sentinel', 'aria-hidden': 'true' });
    this.empty = AP.el('p', { class: 'muted tl-empty', text: 'No events yet.' });
    container.appendChild(this.box);
    container.appendChild(this.empty);
    container.appendChild(this.sentinel);
    this.els = new Map(); // row → element
    this.rendered = 0;
    this.windowEnd = WINDOW_STEP;
    this.visible = false;
    var self = this;
    this.observer = new IntersectionObserver(function (entries) {
      self.visible = entries.some(function (en) { return en.isIntersecting; });
      if (self.visible) self.grow();
    }, { rootMargin: '600px' });
    this.observer.observe(this.sentinel);
    this.scheduled = false;
  }

  // grow widens the window when the reader reaches its end, or asks for more events.
  View.prototype.grow = function () {
    if (this.rendered < this.model.rows.length) {
      this.windowEnd = this.rendered + WINDOW_STEP;
      this.sync();
    } else if (this.opts.needMore) {
      this.opts.needMore();
    }
  };

  // update is called after the model changed; the DOM work waits for the next frame so a
  // burst of events costs one render.
  View.prototype.update = function () {
    if (this.scheduled) return;
    this.scheduled = true;
    var self = this;
    root.requestAnimationFrame(function () {
      self.scheduled = false;
      self.sync();
    });
  };

  View.prototype.sync = function () {
    var m = this.model;
    var self = this;
    m.dirty.forEach(function (row) {
      var e = self.els.get(row);
      if (e) self.fill(e, row);
    });
    m.dirty.clear();
    if (this.opts.follow && this.opts.follow() && this.rendered >= this.windowEnd - 1) {
      this.windowEnd = Math.max(this.windowEnd, m.rows.length);
    }
    var end = Math.min(m.rows.length, this.windowEnd);
    if (this.rendered < end) {
      var frag = document.createDocumentFragment();
      for (var i = this.rendered; i < end; i++) {
        var row = m.rows[i];
        var e = this.make(row);
        this.els.set(row, e);
        frag.appendChild(e);
      }
      this.box.appendChild(frag);
      this.rendered = end;
    }
    this.empty.hidden = m.rows.length > 0;
    // Still at the end with room: keep filling (or fetching) without waiting for a scroll.
    if (this.visible && this.rendered >= m.rows.length && this.opts.needMore) this.opts.needMore();
    else if (this.visible && this.rendered < m.rows.length) {
      this.windowEnd = this.rendered + WINDOW_STEP;
      this.update();
    }
  };

  View.prototype.destroy = function () { this.observer.disconnect(); };

  View.prototype.make = function (row) {
    var e = AP.el('div', { class: 'tl-row kind-' + row.kind, 'data-testid': 'tl-row', dataset: { kind: row.kind, runId: row.runId, seq: row.seq } });
    e.style.setProperty('--depth', String(row.depth));
    this.fill(e, row);
    return e;
  };

  function chip(label, value, field, cls) {
    return AP.el('span', { class: 'chip' + (cls ? ' ' + cls : ''), 'data-field': field || null },
      label ? AP.el('span', { class: 'chip-label', text: label }) : null, AP.el('span', { class: 'chip-value', text: value }));
  }

  function stateClass(s) {
    s = String(s || '').toUpperCase();
    if (s === 'DONE' || s === 'SUCCEEDED' || s === 'APPROVED' || s === 'ALLOW' || s === 'OK') return 'good';
    if (s === 'FAILED' || s === 'REJECTED' || s === 'BLOCKED' || s === 'TIMEOUT' || s === 'ERROR' || s === 'BLOCK') return 'bad';
    if (s === 'CANCELLED' || s === 'EXPIRED' || s.indexOf('PAUSED') === 0 || s.indexOf('WAITING') === 0 || s === 'REQUIRE_APPROVAL' || s === 'PENDING') return 'warn';
    return '';
  }

  View.prototype.fill = function (e, row) {
    var m = this.model;
    var d = row.data;
    var r = m.runs.get(row.runId);
    var rel = m.firstTs ? '+' + AP.fmtDuration(row.ts - m.firstTs) : '';
    var title = [];
    var fields = [];
    var text = null;
    switch (row.kind) {
      case 'run':
        title.push(AP.el('span', { class: 'tl-kind', text: row.depth > 0 ? 'sub-agent run' : 'run' }), ' ',
          AP.el('code', { text: row.runId }), ' · ', AP.el('strong', { text: (r && r.agentId) || d.agentId || '?' }));
        if (r) {
          fields.push(chip('', r.status || '?', 'status', stateClass(r.status)));
          if (r.endedAt) fields.push(chip('took', AP.fmtDuration(r.endedAt - r.startedAt), 'duration'));
          if (r.llmCalls) fields.push(chip('LLM calls', String(r.llmCalls), 'llm_calls'), chip('tokens', AP.fmtInt(r.promptTokens + r.completionTokens), 'tokens'), chip('cost', AP.fmtCost(r.cost), 'cost'));
          if (r.toolCalls) fields.push(chip('tool calls', String(r.toolCalls), 'tool_calls'));
        }
        if (d.parentRunId) fields.push(chip('parent', d.parentRunId, 'parent'));
        if (d.input) text = d.input;
        break;
      case 'output':
        title.push(AP.el('span', { class: 'tl-kind', text: 'output' }), ' ', AP.el('span', { class: 'muted', text: d.count + (d.count === 1 ? ' delta' : ' deltas') }));
        text = d.text + (d.text.length >= 20000 ? '…' : '');
        break;
      case 'state':
        title.push(AP.el('span', { class: 'tl-kind', text: 'state' }), ' ', AP.el('strong', { class: stateClass(d.state), text: String(d.state) }), ' ',
          AP.el('span', { class: 'muted', text: d.source ? '(' + d.source + ')' : '' }));
        if (d.detail != null && d.detail !== '') fields.push(chip('', AP.clip(typeof d.detail === 'string' ? d.detail : JSON.stringify(d.detail), 200), 'detail'));
        break;
      case 'input_required':
        title.push(AP.el('span', { class: 'tl-kind warn', text: 'input required' }));
        text = typeof d.question === 'string' ? d.question : JSON.stringify(d.question);
        break;
      case 'llm':
        title.push(AP.el('span', { class: 'tl-kind', text: 'LLM call' }), ' ', AP.el('strong', { 'data-field': 'model', text: d.model || '?' }));
        if (d.upstreamModel) title.push(' → ', AP.el('span', { text: d.upstreamModel }));
        if (d.pending) {
          fields.push(chip('', 'in flight…', 'outcome', 'warn'));
        } else {
          fields.push(chip('', d.outcome || '?', 'outcome', stateClass(d.outcome)),
            chip('prompt', AP.fmtInt(d.promptTokens), 'prompt_tokens'), chip('completion', AP.fmtInt(d.completionTokens), 'completion_tokens'),
            chip('cached', AP.fmtInt(d.cachedTokens), 'cached_tokens'), chip('reasoning', AP.fmtInt(d.reasoningTokens), 'reasoning_tokens'),
            chip('cost', AP.fmtCost(d.cost), 'cost'), chip('TTFT', AP.fmtDuration(d.ttftMs), 'ttft'), chip('latency', AP.fmtDuration(d.latencyMs), 'latency'));
          if (d.overheadMs) fields.push(chip('proxy', AP.fmtDuration(d.overheadMs), 'proxy_overhead'));
          if (d.partial) fields.push(chip('', 'usage partial', 'partial', 'warn'));
          if (d.error) fields.push(chip('error', d.error.code + (d.error.message ? ': ' + d.error.message : ''), 'error', 'bad'));
        }
        break;
      case 'tool':
        title.push(AP.el('span', { class: 'tl-kind', text: 'tool call' }), ' ', AP.el('strong', { 'data-field': 'tool', text: d.toolName || '?' }),
          d.kind ? AP.el('span', { class: 'muted', text: ' (' + d.kind + ')' }) : null);
        fields.push(chip('', d.state || '?', 'state', stateClass(d.state)));
        if (d.policy) fields.push(chip('policy', d.policy.decision + (d.policy.rule ? ' · rule ' + d.policy.rule : ''), 'policy', stateClass(d.policy.decision)));
        if (d.approval) {
          var a = d.approval;
          var what = a.outcome === 'pending' ? 'waiting for a decision' : a.outcome + (a.decidedBy ? ' by ' + a.decidedBy : '') +
            (a.waitedMs != null ? ' after ' + AP.fmtDuration(a.waitedMs) : '') + (a.reason ? ' — ' + a.reason : '');
          fields.push(chip('approval', what, 'approval', stateClass(a.outcome)));
        }
        if (d.durationMs != null) fields.push(chip('took', AP.fmtDuration(d.durationMs), 'duration'));
        if (d.error) fields.push(chip('error', d.error.code + (d.error.message ? ': ' + AP.clip(d.error.message, 160) : ''), 'error', 'bad'));
        else if (d.ended && d.result !== undefined) fields.push(chip('result', AP.clip(JSON.stringify(d.result), 200), 'result'));
        if (d.args !== undefined) text = AP.clip(JSON.stringify(d.args), 400);
        break;
      case 'end':
        title.push(AP.el('span', { class: 'tl-kind', text: 'run ended' }), ' ', AP.el('strong', { class: stateClass(d.status), text: d.status }));
        if (d.code) fields.push(chip('error', d.code + (d.message ? ': ' + AP.clip(d.message, 200) : ''), 'error', 'bad'));
        if (d.totalCost != null) fields.push(chip('total cost', AP.fmtCost(d.totalCost), 'total_cost'));
        if (d.llmCalls != null) fields.push(chip('LLM calls', String(d.llmCalls), 'llm_calls'));
        if (d.usage && Object.keys(d.usage).length) fields.push(chip('usage', AP.clip(JSON.stringify(d.usage), 160), 'usage'));
        if (d.detail) fields.push(chip('', AP.clip(JSON.stringify(d.detail), 160), 'detail'));
        break;
      case 'subagent':
        title.push(AP.el('span', { class: 'tl-kind', text: d.type.replace(/_/g, ' ') }), ' ', AP.el('strong', { text: d.agentId || '' }));
        if (d.childRunId) fields.push(chip('run', d.childRunId, 'child_run'));
        if (d.code) fields.push(chip('error', d.code + ': ' + d.message, 'error', 'bad'));
        if (d.durationMs != null) fields.push(chip('took', AP.fmtDuration(d.durationMs), 'duration'));
        if (d.text) text = AP.clip(typeof d.text === 'string' ? d.text : JSON.stringify(d.text), 400);
        break;
      default:
        title.push(AP.el('span', { class: 'tl-kind', text: d.type }));
    }
    var json = e.querySelector(':scope > .tl-body > details.tl-json');
    var open = json && json.open;
    var body = AP.el('div', { class: 'tl-body' },
      AP.el('div', { class: 'tl-title' }, title),
      fields.length ? AP.el('div', { class: 'tl-fields' }, fields) : null,
      text ? AP.el('div', { class: 'tl-text', text: text }) : null,
      this.jsonDetails(row, open));
    e.replaceChildren(AP.el('div', { class: 'tl-time', title: AP.fmtTime(row.ts) + ' · seq ' + row.seq }, AP.el('span', { text: AP.fmtClock(row.ts) }), AP.el('span', { class: 'muted', text: rel })), body);
  };

  // jsonDetails is the row's "{ } JSON" disclosure: the events it was made of.
  View.prototype.jsonDetails = function (row, open) {
    var self = this;
    var pre = AP.el('pre', { class: 'tl-json-body' });
    var det = AP.el('details', { class: 'tl-json', 'data-testid': 'tl-json' }, AP.el('summary', { text: '{ } ' + (row.kind === 'output' ? row.data.count : row.events.length) + ' event(s)' }), pre);
    function fill() {
      if (pre.dataset.filled) return;
      pre.dataset.filled = '1';
      if (row.kind !== 'output') {
        pre.textContent = row.events.map(function (ev) { return AP.pretty(ev); }).join('\n');
        return;
      }
      pre.textContent = 'loading…';
      var n = Math.min(row.data.lastSeq - row.data.firstSeq + 1, AP.PAGE_SIZE);
      AP.eventsPage(self.opts.eventsPath, row.data.firstSeq - 1, n).then(function (p) {
        var evs = p.events.filter(function (ev) { return ev.seq <= row.data.lastSeq && ev.run_id === row.runId; });
        pre.textContent = evs.map(function (ev) { return AP.pretty(ev); }).join('\n') + (row.data.lastSeq - row.data.firstSeq + 1 > n ? '\n…' : '');
      }, function (err) { pre.textContent = 'could not load the events: ' + err; });
    }
    det.addEventListener('toggle', function () { if (det.open) fill(); });
    if (open) { det.open = true; fill(); }
    return det;
  };

  var api = { Model: Model, View: View };
  root.AgentplaneTimeline = api;
  if (typeof module === 'object' && module && module.exports) module.exports = api;
})(typeof window !== 'undefined' ? window : globalThis);
