// Drives static/timeline.js's Model — the session view's and the replay's fold of the event log
// into rows — with the events of a run that calls a model, a tool that waits for an approval
// and a sub-agent. Run by TestTimelineModel (chatcore_test.go) when node is installed.
'use strict';

const assert = require('node:assert/strict');
const path = require('node:path');
const { Model } = require(path.join(__dirname, '..', 'static', 'timeline.js'));

let seq = 0;
function ev(type, runId, payload, extra) {
  seq++;
  return Object.assign({ event_id: 'evt_' + seq, session_id: 'ses_1', seq, run_id: runId, parent_run_id: '', ts: 1000 + seq * 10, type, payload }, extra || {});
}

const log = [
  ev('user_input', 'run_a', { message: { role: 'user', content: 'Send 250 to Bob' } }),
  ev('run_started', 'run_a', { agent_id: 'demo', message: { role: 'user', content: 'Send 250 to Bob' }, request_id: 'r1' }),
  ev('agent_invoke_started', 'run_a', { agent_id: 'demo', endpoint: 'http://x' }),
  ev('state', 'run_a', { state: 'thinking', detail: { model: 'demo-llm' }, source: 'agent' }),
  ev('llm_call_started', 'run_a', { call_id: 'c1', model: 'demo-llm', endpoint: 'chat.completions', stream: true }),
  ev('llm_call_done', 'run_a', { call_id: 'c1', model: 'demo-llm', outcome: 'ok', status: 200, prompt_tokens: 120, completion_tokens: 30, cached_tokens: 20,
    reasoning_tokens: 5, total_tokens: 150, estimated_cost: 0.000105, ttft_ms: 41.5, latency_ms: 320.25, proxy_overhead_ms: 0.3 }),
  ev('tool_call_created', 'run_a', { tool_call_id: 'tc_1', tool_name: 'demo.transfer', kind: 'server', args: { amount: 250, to: 'Bob' }, timeout_ms: 60000 }),
  ev('policy_decision', 'run_a', { tool_call_id: 'tc_1', tool_name: 'demo.transfer', decision: 'require_approval', rule: 'large' }),
  ev('approval_created', 'run_a', { approval_id: 'apr_1', tool_call_id: 'tc_1', tool_name: 'demo.transfer', args_summary: 'demo.transfer(amount=250, to="Bob")', expires_at: 999999 }),
  ev('state', 'run_a', { state: 'PAUSED_WAITING_APPROVAL', detail: { tool_call_id: 'tc_1' }, source: 'platform' }),
  ev('approval_decision', 'run_a', { approval_id: 'apr_1', tool_call_id: 'tc_1', tool_name: 'demo.transfer', decision: 'approved', decided_by: 'admin', reason: 'ok', waited_ms: 3200 }),
  ev('tool_dispatched', 'run_a', { tool_call_id: 'tc_1', tool_name: 'demo.transfer', kind: 'server', attempt: 1 }),
  ev('state', 'run_a', { state: 'RUNNING', detail: { tool_call_id: 'tc_1', outcome: 'DISPATCHED' }, source: 'platform' }),
  ev('tool_result', 'run_a', { tool_call_id: 'tc_1', tool_name: 'demo.transfer', state: 'SUCCEEDED', status: 'succeeded', duration_ms: 3300, exec_ms: 12, result: { ok: true } }),
  ev('run_started', 'run_b', { agent_id: 'helper', message: { role: 'user', content: 'help' } }, { parent_run_id: 'run_a' }),
  ev('agent_stream_delta', 'run_b', { text: 'child ' }, { parent_run_id: 'run_a' }),
  ev('agent_stream_delta', 'run_a', { text: 'Sent ' }),
  ev('agent_stream_delta', 'run_a', { text: '250.' }),
  ev('run_done', 'run_b', { usage: {}, total_cost: 0, llm_calls: 0 }, { parent_run_id: 'run_a' }),
  ev('sub_agent_complete', 'run_b', { output: 'child', duration_ms: 40 }, { parent_run_id: 'run_a' }),
  ev('run_failed', 'run_a', { code: 'agent_http_error', message: 'boom' }),
  ev('something_new', 'run_a', { x: 1 }),
];

// Pages that overlap (a resumed stream) and arrive in several batches: each event once.
const m = new Model();
m.add(log.slice(0, 8));
m.add(log.slice(5, 15));
m.add(log.slice(10));
const s = m.summary();
assert.equal(s.lastSeq, log.length);
assert.equal(s.events, log.length, 'every event applied once');
assert.deepEqual(s.counts, { run: 2, state: 3, llm: 1, tool: 1, output: 2, end: 2, subagent: 1, event: 1 });

assert.deepEqual(s.runs.map((r) => [r.runId, r.parentRunId, r.depth, r.agentId, r.status]), [
  ['run_a', '', 0, 'demo', 'FAILED'],
  ['run_b', 'run_a', 1, 'helper', 'DONE'],
]);
assert.equal(s.runs[0].llmCalls, 1);
assert.equal(s.runs[0].toolCalls, 1);

assert.deepEqual(s.llm, [{ runId: 'run_a', model: 'demo-llm', promptTokens: 120, completionTokens: 30, cachedTokens: 20, reasoningTokens: 5,
  cost: 0.000105, ttftMs: 41.5, latencyMs: 320.25, done: true }]);

const tool = s.tools[0];
assert.equal(tool.toolName, 'demo.transfer');
assert.equal(tool.state, 'SUCCEEDED');
assert.deepEqual(tool.policy, { decision: 'require_approval', rule: 'large', expr: '' });
assert.equal(tool.approval.outcome, 'approved');
assert.equal(tool.approval.decidedBy, 'admin');
assert.equal(tool.approval.waitedMs, 3200);
assert.equal(tool.durationMs, 3300);

// The tool row holds the six events it was made of; the output rows hold none but know their
// seqs; the child's rows sit one level down.
const toolRow = m.rows.find((r) => r.kind === 'tool');
assert.deepEqual(toolRow.events.map((e) => e.type), ['tool_call_created', 'policy_decision', 'approval_created', 'approval_decision', 'tool_dispatched', 'tool_result']);
const outputs = m.rows.filter((r) => r.kind === 'output');
assert.deepEqual(outputs.map((r) => [r.runId, r.depth, r.data.text, r.data.count, r.events.length]), [['run_b', 1, 'child ', 1, 0], ['run_a', 0, 'Sent 250.', 2, 0]]);
assert.equal(outputs[1].data.firstSeq, 17);
assert.equal(outputs[1].data.lastSeq, 18);
const header = m.rows.find((r) => r.kind === 'run' && r.runId === 'run_a');
assert.equal(header.data.input, 'Send 250 to Bob');
assert.deepEqual(header.events.map((e) => e.type), ['user_input', 'run_started', 'agent_invoke_started']);
const end = m.rows.filter((r) => r.kind === 'end').map((r) => r.data.code || r.data.status);
assert.deepEqual(end, ['DONE', 'agent_http_error']);

// Joining mid-stream (jump to the latest events): rows without their beginning still show.
const late = new Model();
late.add(log.slice(10, 14));
const ls = late.summary();
assert.equal(ls.tools.length, 1);
assert.equal(ls.tools[0].state, 'SUCCEEDED');
assert.equal(ls.tools[0].approval.outcome, 'approved');

console.log('timeline model: ok');
