// session.js — the session view (/console/sessions/{id}): the run tree and the timeline of every
// run, LLM call, tool call and state, loaded a page of the log at a time as the reader scrolls,
// then followed live (GET /v1/sessions/{id}/events?follow=1, resumed after a reconnect, or after
// the page comes back from the back/forward cache, from the last seq), the summary line (events,
// last event, agents) keeping up. ?run=RUN_ID narrows the timeline to one run's events.
(function (root) {
  'use strict';

  var el = AP.el;
  var Timeline = root.AgentplaneTimeline;

  function nearBottom() {
    var d = document.documentElement;
    return root.innerHeight + root.scrollY >= d.scrollHeight - 300;
  }

  // runTree renders runs nested by parent_run_id (runs whose parent is unknown are roots).
  function runTree(runs, sessionId, selected) {
    var byParent = new Map();
    var ids = new Set(runs.map(function (r) { return r.run_id; }));
    runs.forEach(function (r) {
      var p = r.parent_run_id && ids.has(r.parent_run_id) ? r.parent_run_id : '';
      if (!byParent.has(p)) byParent.set(p, []);
      byParent.get(p).push(r);
    });
    function list(parent, depth) {
      var kids = byParent.get(parent) || [];
      if (!kids.length) return null;
      return el('ul', { class: depth ? 'run-children' : 'run-tree', 'data-testid': depth ? null : 'run-tree' }, kids.map(function (r) {
        var dur = r.ended_at ? AP.fmtDuration(r.ended_at - r.started_at) : 'running';
        var href = '/console/sessions/' + encodeURIComponent(sessionId) + '?run=' + encodeURIComponent(r.run_id);
        return el('li', { dataset: { runId: r.run_id, status: r.status }, class: r.run_id === selected ? 'selected' : null },
          el('div', { class: 'run-line' },
            AP.link(href, r.run_id, { class: 'mono' }), ' ',
            el('strong', { text: r.agent_id }), ' ',
            el('span', { class: 'badge ' + statusClass(r.status), text: r.status }), ' ',
            el('span', { class: 'muted', text: dur }),
            r.error && r.error.code ? el('span', { class: 'bad', text: ' ' + r.error.code }) : null),
          list(r.run_id, depth + 1));
      }));
    }
    return list('', 0) || el('p', { class: 'muted', text: 'No runs yet.' });
  }

  function statusClass(s) {
    if (s === 'DONE') return 'good';
    if (s === 'FAILED') return 'bad';
    if (s === 'CANCELLED' || (s && s.indexOf('PAUSED') === 0)) return 'warn';
    return 'info';
  }

  AP.statusClass = statusClass;

  AP.route('/console/sessions/:id', 'session', function (view, params, q) {
    var id = params.id;
    var runFilter = q.get('run') || '';
    var eventsPath = runFilter ? '/v1/runs/' + encodeURIComponent(runFilter) + '/events' : '/v1/sessions/' + encodeURIComponent(id) + '/events';
    var page = el('div', { class: 'page session-page' });
    view.appendChild(page);

    var live = el('span', { class: 'live', 'data-testid': 'live-status', dataset: { state: 'loading' }, text: 'loading…' });
    var meta = el('p', { class: 'muted session-meta', 'data-testid': 'session-meta' });
    var runsBox = el('div', { class: 'runs-box' }, el('p', { class: 'muted', text: 'loading runs…' }));
    var errBox = el('div', { class: 'error-box', role: 'alert', hidden: true });
    var jump = el('button', { type: 'button', class: 'btn btn-small', text: 'Jump to latest', title: 'Load the end of the log and follow it live', 'data-testid': 'jump-latest' });
    page.appendChild(el('div', { class: 'page-head' },
      el('h1', {}, 'Session ', el('code', { 'data-testid': 'session-id', text: id })),
      el('div', { class: 'head-actions' }, live, jump,
        AP.link('/console/sessions/' + encodeURIComponent(id) + '/replay', 'Replay', { class: 'btn btn-small btn-primary', 'data-testid': 'replay-link' }))));
    var loadNote = el('div'); // why the log cannot be read just now, while it is tried again
    var jumpNote = el('div'); // why Jump to latest cannot read where the log ends, likewise
    page.appendChild(meta);
    page.appendChild(errBox);
    page.appendChild(loadNote);
    page.appendChild(jumpNote);
    page.appendChild(el('details', { class: 'runs-panel', open: true }, el('summary', { text: 'Run tree' }), runsBox));
    if (runFilter) {
      page.appendChild(el('p', { class: 'filter-note' }, 'Showing run ', el('code', { text: runFilter }), ' only (not followed live). ',
        AP.link('/console/sessions/' + encodeURIComponent(id), 'Show the whole session')));
    }
    var tlBox = el('div', { class: 'timeline-box' });
    page.appendChild(tlBox);

    var model, tview, cursor, loading, atEnd, follower, pager = null, jumper = null, stopped = false, error = null, liveState = 'loading';
    var apiRuns = [];
    // What the summary line says: the session's row, then what the events read since add to it,
    // so it keeps up with the timeline while the session is live.
    var summary = null; // {user_id, created_at, last_seq, last_event_at, agents}

    function showSummary() {
      if (!summary) return;
      meta.replaceChildren('user ' + (summary.user_id || '—') + ' · created ' + AP.fmtTime(summary.created_at) + ' · ',
        el('span', { 'data-testid': 'session-events', text: AP.fmtInt(summary.last_seq) }), ' events · last event ',
        el('span', { 'data-testid': 'session-last-event', dataset: { ts: summary.last_event_at || 0 }, text: AP.fmtTime(summary.last_event_at) }),
        ' · agents ' + (summary.agents.join(', ') || '—'));
    }

    // noteModel folds what the events read so far say (a page, or a batch of the live stream)
    // into the summary.
    function noteModel() {
      if (!summary || runFilter) return; // one run's events say nothing of the session's end
      var changed = false;
      if (model.lastSeq > summary.last_seq) { summary.last_seq = model.lastSeq; changed = true; }
      if (model.lastTs > summary.last_event_at) { summary.last_event_at = model.lastTs; changed = true; }
      model.runOrder.forEach(function (r) {
        if (r.agentId && summary.agents.indexOf(r.agentId) < 0) { summary.agents.push(r.agentId); changed = true; }
      });
      if (changed) showSummary();
    }

    function setLive(s, text) {
      liveState = s;
      live.dataset.state = s;
      live.textContent = text;
    }

    function fail(err) {
      error = err;
      if (pager) pager.stop();
      loadNote.replaceChildren();
      errBox.hidden = false;
      errBox.textContent = err.status === 404 ? 'No such session (or not yours): ' + id : 'Could not load the session: ' + err;
      setLive('stopped', 'not loaded');
    }

    function start(from) {
      if (follower) follower.stop();
      follower = null;
      if (pager) pager.stop();
      pager = null;
      loadNote.replaceChildren();
      if (tview) tview.destroy();
      tlBox.replaceChildren();
      model = new Timeline.Model();
      cursor = from;
      loading = false;
      atEnd = false;
      tview = new Timeline.View(tlBox, model, {
        needMore: loadMore, eventsPath: eventsPath,
        follow: function () { return nearBottom(); },
      });
      loadMore();
    }

    // loadMore reads the next page of the log, trying again while the server cannot be reached
    // (keepLoading: a page opened while it restarts fills in once it is back).
    function loadMore() {
      if (loading || atEnd || stopped || error) return;
      loading = true;
      var mine = model; // a page read for a timeline since started over (Jump to latest) is not drawn
      pager = AP.keepLoading(function () {
        return AP.eventsPage(eventsPath, cursor, AP.PAGE_SIZE).then(function (p) { drawPage(p, mine); });
      }, {
        message: function (err) { return 'Could not load the session: ' + err; },
        onError: function () { if (mine === model) setLive('retrying', 'not loaded, trying again…'); },
        onFinal: function (err) {
          loadNote.replaceChildren();
          if (mine === model) { loading = false; fail(err); }
        },
      });
      loadNote.replaceChildren(pager.note);
    }

    function drawPage(p, mine) {
      if (stopped || mine !== model) return;
      loading = false;
      model.add(p.events);
      noteModel();
      cursor = p.next;
      if (p.events.length < AP.PAGE_SIZE) {
        atEnd = true;
        if (runFilter) setLive('filtered', 'one run');
        else startFollow();
      } else if (liveState === 'loading' || liveState === 'retrying') {
        setLive('paging', 'loading as you scroll');
      }
      tview.update();
      refreshRuns();
    }

    function startFollow() {
      setLive('connecting', 'connecting…');
      follower = AP.follow(id, cursor, function (events) {
        model.add(events);
        noteModel();
        cursor = model.lastSeq;
        tview.update();
        refreshRuns();
      }, function (s, info) {
        if (s === 'live') setLive('live', '● live');
        else if (s === 'reconnecting') setLive('reconnecting', 'reconnecting after seq ' + info.lastSeq + '…');
        else if (s === 'suspended') setLive('connecting', 'resuming after seq ' + info.lastSeq + '…');
        else if (s === 'stopped' && info.error) fail(info.error);
      });
    }

    // The run tree: the runs API (every run, even those not loaded yet) with what the
    // loaded events say since.
    var runsTimer = null;
    function refreshRuns() {
      if (runsTimer) return;
      runsTimer = root.setTimeout(function () {
        runsTimer = null;
        if (stopped) return;
        var merged = apiRuns.slice();
        var known = new Map(merged.map(function (r) { return [r.run_id, r]; }));
        model.runOrder.forEach(function (r) {
          if (!r.runId) return;
          var a = known.get(r.runId);
          if (!a) {
            a = { run_id: r.runId, parent_run_id: r.parentRunId, agent_id: r.agentId, status: r.status, started_at: r.startedAt, ended_at: r.endedAt, error: r.error };
            merged.push(a);
            known.set(r.runId, a);
          } else if (r.endedAt || !a.ended_at) {
            a.status = r.status || a.status;
            a.ended_at = r.endedAt || a.ended_at;
            if (r.error) a.error = r.error;
          }
        });
        runsBox.replaceChildren(runTree(merged, id, runFilter));
      }, 250);
    }

    // The summary and the runs are read until they can be (keepLoading), quietly: the log's
    // own note says when the server cannot be reached.
    var summaryLoader = AP.keepLoading(function () {
      return AP.sessionSummary(id).then(showSessionRow);
    }, { onFinal: fail });
    var runsLoader = AP.keepLoading(function () {
      return AP.allPages('/v1/runs', { session_id: id, order: 'asc' }, 'runs', 5000).then(function (runs) {
        if (stopped) return;
        apiRuns = runs;
        refreshRuns();
      });
    }, { onFinal: function () { /* the events say enough */ } });

    function showSessionRow(s) {
      if (stopped) return;
      if (!s) {
        fail(new AP.APIError(404, 'session_not_found', 'no such session'));
        return;
      }
      summary = { user_id: s.user_id, created_at: s.created_at, last_seq: s.last_seq || 0, last_event_at: s.last_event_at || 0, agents: (s.agents || []).slice() };
      showSummary();
      noteModel(); // what was read before the row came counts too
    }

    // jumpToLatest reads where the log ends now and starts over 200 events before it. The read is
    // tried again while the server cannot be reached, its note saying so (a failure was silent:
    // the button did nothing); a click meanwhile tries at once rather than asking twice.
    function jumpToLatest() {
      if (jumper && jumper.busy) { jumper.loader.now(); return; }
      if (jumper) { jumper.loader.stop(); jumper.loader.note.remove(); }
      var mine = jumper = { busy: true, loader: null };
      function done() {
        mine.busy = false;
        mine.loader.stop();
      }
      mine.loader = AP.keepLoading(function () {
        return AP.sessionSummary(id).then(function (s2) {
          if (stopped || mine !== jumper) return;
          if (!s2) throw new AP.APIError(404, 'session_not_found', 'no such session');
          done();
          mine.loader.note.remove();
          start(Math.max(0, (s2.last_seq || 0) - 200));
        });
      }, {
        message: function (err) { return 'Could not jump to the latest events: ' + err; },
        onFinal: function () { if (mine === jumper) done(); }, // the note stays, saying why
      });
      jumpNote.replaceChildren(mine.loader.note);
    }
    jump.addEventListener('click', jumpToLatest);
    start(0);

    AP.pageState = function () {
      var s = model ? model.summary() : {};
      s.sessionId = id;
      s.live = liveState;
      s.rendered = tview ? tview.rendered : 0;
      s.error = error ? error.code : '';
      s.runFilter = runFilter;
      s.summary = summary ? { events: summary.last_seq, lastEventAt: summary.last_event_at, agents: summary.agents.slice() } : null;
      return s;
    };

    return function () {
      stopped = true;
      summaryLoader.stop();
      runsLoader.stop();
      if (pager) pager.stop();
      if (jumper) jumper.loader.stop();
      if (follower) follower.stop();
      if (tview) tview.destroy();
      if (runsTimer) root.clearTimeout(runsTimer);
    };
  });
})(window);
