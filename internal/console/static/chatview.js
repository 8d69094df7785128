// chatview.js — draws the conversation chat.js keeps (its items: user and agent bubbles, tool,
// approval and sub-agent cards) into a container element. The chat page (app.js) and the
// console's replay (replay.js) both draw with it, so a replay shows a session exactly as the chat
// page did: the same items, in the same order, nested the same way. Server data only ever
// reaches the DOM through textContent.
(function (root) {
  'use strict';

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

  // ChatView renders into box (the element the chat's top-level items go in).
  //
  // opts:
  //   readOnly            no buttons and no countdowns on the cards (a replay: nothing to decide,
  //                       and the deadlines were on another clock)
  //   decideApproval(item, decision, reason)   Approve / Reject clicked on an approval card
  //   declineTool(item)   Decline clicked on a tool card
  //
  // The returned object's added / updated / cleared are what chat.js's view callbacks take;
  // tick re-renders the countdowns (call it once a second).
  function ChatView(box, opts) {
    opts = opts || {};
    var readOnly = !!opts.readOnly;
    var itemEls = new Map(); // item id → its .msg element
    var countdowns = new Map(); // .countdown element → {ms, label}: deadlines shown ticking

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

    function countdown(li) {
      var meta = div('meta');
      var cd = document.createElement('span');
      cd.className = 'countdown';
      cd.hidden = true;
      meta.appendChild(cd);
      li.appendChild(meta);
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
      countdown(li);
      if (!t.supported && !readOnly) {
        var actions = div('actions');
        var run = button('Run', 'btn-primary', 'run-tool-button');
        run.disabled = true;
        run.title = 'This page has no tool by that name';
        actions.appendChild(run);
        actions.appendChild(button('Decline', 'btn-danger', 'decline-button', function () {
          if (opts.declineTool) opts.declineTool(item);
        }));
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
      countdown(li);
      if (readOnly) return;
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
          if (opts.decideApproval) opts.decideApproval(item, d[0], reason.value);
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
      var actions = li.querySelector('.actions');
      if (!actions) return;
      // Sent: the buttons stay in sight, disabled, until the outcome arrives; then they go.
      actions.hidden = !open && a.state !== 'sent';
      actions.querySelectorAll('button').forEach(function (b) { b.disabled = !open; });
      actions.querySelector('.reason').disabled = !open;
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
      if (!next && item.kind && owner) next = box.querySelector(':scope > .msg.assistant[data-run-id="' + CSS.escape(owner) + '"]');
      box.insertBefore(li, next);
    }

    // --- deadlines shown as a countdown ---

    function setCountdown(li, ms, label) {
      var c = li.querySelector('.countdown');
      if (ms == null || readOnly) {
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

    return {
      added: function (item, before) {
        var li = createItemEl(item);
        itemEls.set(item.id, li);
        updateItemEl(li, item);
        placeItem(li, item, before);
      },
      updated: function (item) {
        var li = itemEls.get(item.id);
        if (li) updateItemEl(li, item);
      },
      cleared: function () {
        itemEls.clear();
        countdowns.clear();
        box.replaceChildren();
      },
      tick: function () {
        countdowns.forEach(function (d, c) {
          if (c.isConnected) renderCountdown(c, d);
          else countdowns.delete(c);
        });
      },
    };
  }

  root.AgentplaneChatView = ChatView;
})(window);
