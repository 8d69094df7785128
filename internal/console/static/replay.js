// replay.js — replay of a session as it happened (/console/sessions/{id}/replay): the log is read
// a page at a time and played on a clock at 1×, 10× or as fast as it can be drawn ("instant"),
// pausable and seekable (a slider over the seqs), with the chat — fed what the chat page was
// sent, run by its own protocol core (chat.js) and drawn by its own view (chatview.js) — and the
// timeline in step. Long idle gaps (an approval waiting for a human) are shortened to
// MAX_GAP_MS so a replay never sits still for minutes.
// ?speed=1|10|instant&autoplay=1 start it without a click.
(function (root) {
  'use strict';

  var el = AP.el;
  var Timeline = root.AgentplaneTimeline;
  var Core = root.AgentplaneChatCore;

  var MAX_GAP_MS = 2000;
  var FRAME_BUDGET_MS = 12; // work per animation frame, so the page stays responsive
  var PREFETCH_BELOW = 300; // fetch the next page when fewer events than this are buffered

  // clientTypes maps log event types to the message type clients are sent (the table of
  // internal/ingress/messages.go); other types are internal and never reach a chat.
  var clientTypes = {
    run_started: 'run_started', agent_stream_delta: 'delta', state: 'state', run_done: 'done', run_failed: 'error',
    run_cancelled: 'state', tool_request: 'tool_request', approval_created: 'approval_required',
    input_required: 'input_required', sub_agent_call_start: 'sub_agent_call_start', sub_agent_partial: 'sub_agent_partial',
    sub_agent_complete: 'sub_agent_complete', sub_agent_error: 'sub_agent_error',
  };

  // childInternal are the types a child run's clients are not sent (ingress.childInternal): the
  // sub_agent_* events stand in for a child's start, deltas and end (DESIGN §11).
  var childInternal = {
    run_started: true, agent_stream_delta: true, run_done: true, run_failed: true, run_cancelled: true, input_required: true,
  };

  // BROWSER_ERRORS are the error codes the chat page itself answers a client tool with (chat.js).
  var BROWSER_ERRORS = { unsupported_tool: true, tool_error: true };

  // clientMessage is the message a chat client was sent for a logged event (the envelope, then
  // the payload's fields, as ingress.ClientMessage builds it), or null for an event no client
  // is sent.
  function clientMessage(e) {
    var type = clientTypes[e.type];
    if (!type || (e.parent_run_id && childInternal[e.type])) return null;
    var m = { type: type, session_id: e.session_id, seq: e.seq, event_id: e.event_id, ts: e.ts, run_id: e.run_id };
    if (e.parent_run_id) m.parent_run_id = e.parent_run_id;
    var p = e.payload;
    if (p && typeof p === 'object' && !Array.isArray(p)) Object.keys(p).forEach(function (k) { m[k] = p[k]; });
    return m;
  }
  AP.clientMessage = clientMessage;

  AP.route('/console/sessions/:id/replay', 'replay', function (view, params, q) {
    var id = params.id;
    var eventsPath = '/v1/sessions/' + encodeURIComponent(id) + '/events';
    var page = el('div', { class: 'page replay-page' });
    view.appendChild(page);

    var playBtn = el('button', { type: 'button', class: 'btn btn-primary', 'data-testid': 'play', text: 'Play' });
    var speeds = ['1', '10', 'instant'].map(function (s) {
      return el('button', { type: 'button', class: 'btn btn-small speed', 'data-testid': 'speed-' + s, dataset: { speed: s }, text: s === 'instant' ? 'instant' : s + '×' });
    });
    var slider = el('input', { type: 'range', min: '0', max: '0', value: '0', step: '1', 'data-testid': 'seek', 'aria-label': 'Position in the log (seq)' });
    var pos = el('span', { class: 'replay-pos', 'data-testid': 'replay-pos', text: 'loading…' });
    var errBox = el('div', { class: 'error-box', role: 'alert', hidden: true });
    page.appendChild(el('div', { class: 'page-head' },
      el('h1', {}, 'Replay of ', AP.link('/console/sessions/' + encodeURIComponent(id), id, { class: 'mono' })),
      el('div', { class: 'head-actions' }, AP.link('/console/sessions/' + encodeURIComponent(id), 'Live view', { class: 'btn btn-small' }))));
    page.appendChild(errBox);
    var loadNotes = el('div'); // why the summary or a page of the log cannot be read just now, while it is tried again
    page.appendChild(loadNotes);
    page.appendChild(el('div', { class: 'replay-controls' }, playBtn, el('span', { class: 'speeds' }, speeds), slider, pos));
    var chatBox = el('div', { class: 'messages', 'data-testid': 'replay-chat' });
    var tlBox = el('div', { class: 'timeline-box' });
    page.appendChild(el('div', { class: 'replay-panes' },
      el('section', { class: 'pane chat-pane', 'aria-label': 'Chat' }, el('h2', { text: 'Chat' }), chatBox),
      el('section', { class: 'pane timeline-pane', 'aria-label': 'Timeline' }, el('h2', { text: 'Timeline' }), tlBox)));

    var st = {
      lastSeq: 0, firstTs: 0, speed: q.get('speed') === 'instant' ? 'instant' : q.get('speed') === '10' ? 10 : 1,
      playing: false, finished: false, started: false, seeking: false,
      buf: [], bi: 0, next: 0, exhausted: false, fetching: null, cancelFetch: null,
      seekGen: 0, // which seek is the latest: an older one stops where it is
      pos: 0, clock: 0, lastFrame: 0, frame: 0,
      resume: false, // play again once the seek under way lands (it was playing, or asked to)
      applied: 0, // events applied since the replay last started over (pageState, for tests)
    };
    var model, tview, chat, stopped = false, error = null;

    function reset() {
      if (tview) tview.destroy();
      tlBox.replaceChildren();
      model = new Timeline.Model();
      tview = new Timeline.View(tlBox, model, {
        eventsPath: eventsPath,
        // At the bottom of the page the timeline keeps up with the replay.
        follow: function () { return root.innerHeight + root.scrollY >= document.documentElement.scrollHeight - 300; },
      });
      chatBox.replaceChildren();
      // Drawn by the chat page's own view (chatview.js), read-only: nothing here decides.
      chat = new Core.Chat({
        url: null, settings: { user: '', key: '', agent: '' }, sessionId: id, view: root.AgentplaneChatView(chatBox, { readOnly: true }),
        clientTools: {}, now: function () { return st.clock || Date.now(); },
        // The replay's cards settle from the log's own outcomes, never from a timer.
        setTimeout: function () { return 0; }, clearTimeout: function () {},
        WebSocket: function () { throw new Error('a replay has no connection'); },
      });
      st.buf = [];
      st.bi = 0;
      st.next = 0;
      st.exhausted = false;
      if (st.cancelFetch) st.cancelFetch();
      st.fetching = null;
      st.pos = 0;
      st.applied = 0;
      st.clock = 0;
      st.finished = false;
      showControls();
    }

    function buffered() { return st.buf.length - st.bi; }

    // keep runs load until it succeeds (AP.keepLoading: a failure that may pass is tried again
    // after a backoff, 1 s doubling to 15 s, and at once on focus or back online), its note under
    // the head meanwhile; a final failure shows as the replay's error. Once done, its note goes
    // (the loader stops by itself). Returns the loader.
    function keep(load, onFinal) {
      var loader = AP.keepLoading(function () {
        return load().then(function () { loader.note.remove(); });
      }, {
        message: function (err) { return 'Could not load the log: ' + err; },
        onFinal: function (err) {
          loader.stop();
          loader.note.remove();
          if (onFinal) onFinal(err);
          if (!stopped) fail(err);
        },
      });
      loadNotes.appendChild(loader.note);
      return loader;
    }

    // fetch reads the next page of the log into the buffer, one request at a time: a caller
    // arriving while it loads (or waits to try again) waits for the same page. It resolves true
    // once the page is in, false if it failed for good, or if the replay started over (reset)
    // meanwhile: that page is no longer the next one. A forward seek does not start over, so the
    // page it waits for is kept. (Dropping it, as this once did, left the request marked as
    // loading for ever and the seek spinning on it: the page froze.) A failure that may pass
    // (the server restarting) is tried again until the page comes, as on the list pages; it was
    // final, and the replay dead until a reload.
    function fetch() {
      if (st.exhausted) return Promise.resolve(true);
      if (st.fetching) return st.fetching;
      var settled = false;
      var resolve;
      var loader = null;
      function finish(ok) {
        if (settled) return;
        settled = true;
        if (st.fetching === promise) { st.fetching = null; st.cancelFetch = null; }
        resolve(ok);
      }
      var promise = new Promise(function (r) { resolve = r; });
      st.fetching = promise;
      // Starting over: the page's loader, perhaps waiting to try again, is done with.
      st.cancelFetch = function () { loader.stop(); loader.note.remove(); finish(false); };
      loader = keep(function () {
        return AP.eventsPage(eventsPath, st.next, AP.PAGE_SIZE).then(function (p) {
          if (settled) return; // the replay started over meanwhile
          if (st.bi > 0) { st.buf = st.buf.slice(st.bi); st.bi = 0; }
          st.buf = st.buf.concat(p.events);
          st.next = p.next;
          if (p.events.length < AP.PAGE_SIZE) st.exhausted = true;
          if (p.events.length && p.events[p.events.length - 1].seq > st.lastSeq) {
            st.lastSeq = p.events[p.events.length - 1].seq;
            slider.max = String(st.lastSeq);
          }
          finish(true);
        });
      }, function () { finish(false); });
      return promise;
    }

    function apply(e) {
      model.add([e]);
      var m = clientMessage(e);
      if (m) chat.onLogEvent(m);
      else if (e.type === 'tool_result') answerFromLog(e.payload || {});
      st.pos = e.seq;
      st.applied++;
      if (!st.started) st.started = true;
    }

    // answerFromLog puts on a client tool's card what the chat page answered, as the page showed
    // it: the log has it as the call's result (tool_result, which clients are not sent).
    function answerFromLog(p) {
      var card = chat.toolCards.get(p.tool_call_id);
      if (!card || card.tool.answer) return;
      var answer = null;
      if (p.state === 'SUCCEEDED') answer = { ok: true, result: p.result === undefined ? null : p.result };
      else if (p.error && BROWSER_ERRORS[p.error.code]) answer = { ok: false, error: { code: p.error.code, message: p.error.message || '' } };
      if (answer) chat.setTool(card, { answer: answer });
    }

    function fail(err) {
      error = err;
      st.playing = false;
      errBox.hidden = false;
      errBox.textContent = err.status === 404 ? 'No such session (or not yours): ' + id : 'Could not load the log: ' + err;
      showControls();
    }

    function showControls() {
      playBtn.textContent = st.playing ? 'Pause' : st.finished ? 'Replay again' : 'Play';
      speeds.forEach(function (b) { b.classList.toggle('active', String(st.speed) === b.dataset.speed); });
      if (!st.seeking) slider.value = String(st.pos);
      var t = st.clock && st.firstTs ? ' · t+' + AP.fmtDuration(st.clock - st.firstTs) : '';
      pos.textContent = 'seq ' + st.pos + ' of ' + st.lastSeq + t + (st.finished ? ' · finished' : st.playing ? ' · playing' : ' · paused');
    }

    // frame plays what the clock has reached, within the frame's budget.
    function frame(now) {
      st.frame = 0;
      if (!st.playing || stopped) return;
      var dt = st.lastFrame ? now - st.lastFrame : 0;
      st.lastFrame = now;
      // Waiting for a page (it may be tried again for a while), the replay's clock stands still.
      if (st.speed !== 'instant' && buffered() > 0) st.clock += dt * st.speed;
      var t0 = root.performance.now();
      var applied = 0;
      while (buffered() > 0 && root.performance.now() - t0 < FRAME_BUDGET_MS) {
        var e = st.buf[st.bi];
        if (st.speed !== 'instant') {
          if (!st.clock) st.clock = e.ts;
          if (e.ts > st.clock) {
            // Skip most of a long quiet stretch.
            if (e.ts - st.clock > MAX_GAP_MS) st.clock = e.ts - MAX_GAP_MS;
            break;
          }
        } else {
          st.clock = e.ts;
        }
        st.bi++;
        apply(e);
        applied++;
      }
      if (applied) tview.update();
      if (buffered() < PREFETCH_BELOW && !st.exhausted) fetch();
      if (buffered() === 0 && st.exhausted && !st.fetching) {
        st.playing = false;
        st.finished = true;
        showControls();
        return;
      }
      showControls();
      schedule();
    }

    function schedule() {
      if (!st.frame && st.playing) st.frame = root.requestAnimationFrame(frame);
    }

    function play() {
      if (st.finished) {
        seek(0, true);
        return;
      }
      st.playing = true;
      st.lastFrame = 0;
      if (buffered() === 0 && !st.exhausted) fetch().then(schedule);
      else schedule();
      showControls();
    }

    function pause() {
      st.playing = false;
      st.resume = false;
      showControls();
    }

    // seek moves to just after seq target: backwards starts over from the first event; either
    // way the events up to target are applied at once, a frame's budget at a time. A later seek
    // takes over from this one wherever it is; a page that cannot be read just now is waited for
    // (tried again on the backoff); one that cannot be read at all ends it there (the error shows).
    function seek(target, thenPlay) {
      var mine = ++st.seekGen;
      st.resume = !!(thenPlay || st.playing || st.resume);
      st.playing = false;
      st.seeking = true;
      if (target < st.pos) reset();
      function more() {
        fetch().then(function (ok) {
          if (ok) step();
          else if (mine === st.seekGen) {
            st.seeking = false;
            st.resume = false;
            showControls();
          }
        });
      }
      function step() {
        if (stopped || mine !== st.seekGen) return;
        var t0 = root.performance.now();
        while (buffered() > 0 && st.pos < target && root.performance.now() - t0 < FRAME_BUDGET_MS) {
          var e = st.buf[st.bi++];
          st.clock = e.ts;
          apply(e);
        }
        tview.update();
        showControls();
        if (st.pos < target && buffered() === 0 && !st.exhausted) {
          more();
          return;
        }
        if (st.pos < target && buffered() > 0) {
          root.requestAnimationFrame(step);
          return;
        }
        st.seeking = false;
        st.finished = buffered() === 0 && st.exhausted;
        var resume = st.resume;
        st.resume = false;
        showControls();
        if (resume && !st.finished) play();
      }
      if (buffered() === 0 && !st.exhausted) more();
      else step();
    }

    playBtn.addEventListener('click', function () { if (st.playing) pause(); else play(); });
    speeds.forEach(function (b) {
      b.addEventListener('click', function () {
        var s = b.dataset.speed;
        st.speed = s === 'instant' ? 'instant' : Number(s);
        st.lastFrame = 0;
        showControls();
      });
    });
    slider.addEventListener('input', function () { st.seeking = true; });
    slider.addEventListener('change', function () { seek(Number(slider.value), false); });

    reset();
    var summaryLoader = keep(function () {
      return AP.sessionSummary(id).then(function (s) {
        if (stopped) return;
        if (!s) throw new AP.APIError(404, 'session_not_found', 'no such session');
        st.lastSeq = Math.max(st.lastSeq, s.last_seq);
        slider.max = String(st.lastSeq);
        showControls();
      });
    });
    fetch().then(function () {
      if (stopped || error) return;
      if (st.buf.length) st.firstTs = st.buf[0].ts;
      showControls();
      if (q.get('autoplay') === '1') play();
    });

    AP.pageState = function () {
      return {
        sessionId: id, pos: st.pos, lastSeq: st.lastSeq, playing: st.playing, finished: st.finished, started: st.started, seeking: st.seeking,
        speed: String(st.speed), buffered: buffered(), applied: st.applied, error: error ? error.code : '', fetching: !!st.fetching,
        chat: chat ? chat.snapshot() : null,
        timeline: model ? { rows: model.rows.length, lastSeq: model.lastSeq, events: model.events, counts: model.summary().counts } : null,
      };
    };

    return function () {
      stopped = true;
      st.playing = false;
      summaryLoader.stop();
      if (st.cancelFetch) st.cancelFetch();
      if (st.frame) root.cancelAnimationFrame(st.frame);
      if (tview) tview.destroy();
    };
  });
})(window);
