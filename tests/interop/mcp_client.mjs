// An agent's tool client written with the npm MCP SDK (@modelcontextprotocol/sdk)
// against agentplane's /mcp server. Driven by internal/e2e (TestMCPServerEndpoint):
// it is not a `node --test` file. Each step prints one JSON line on stdout.
//
// Environment:
//   MCP_URL            the platform's /mcp URL
//   MCP_KEY, MCP_RUN_ID  the agent's key and the run the session is for
//   MCP_ALLOWED_TOOL, MCP_ALLOWED_ARGS    a tool the policy allows (args as JSON)
//   MCP_APPROVAL_TOOL, MCP_APPROVAL_ARGS  a tool needing approval; the test
//                      approves its first call and leaves the second, which
//                      this script cancels once it is pending.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const textOf = (r) => (r.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('');

const transport = new StreamableHTTPClientTransport(new URL(env('MCP_URL')), {
  requestInit: { headers: { Authorization: `Bearer ${env('MCP_KEY')}`, 'x-run-id': env('MCP_RUN_ID') } },
});
const client = new Client({ name: 'interop-agent', version: '1.0.0' });
await client.connect(transport);
out({ step: 'connected', session: transport.sessionId });

const { tools } = await client.listTools();
out({ step: 'tools', names: tools.map((t) => t.name), titles: tools.map((t) => t.title) });

const allowed = await client.callTool({ name: env('MCP_ALLOWED_TOOL'), arguments: JSON.parse(env('MCP_ALLOWED_ARGS')) });
out({ step: 'allowed', isError: !!allowed.isError, text: textOf(allowed), structured: allowed.structuredContent ?? null, meta: allowed._meta ?? null });

// Waiting for a human: progress keeps the request alive (resetTimeoutOnProgress).
const progress = [];
const approved = await client.callTool(
  { name: env('MCP_APPROVAL_TOOL'), arguments: JSON.parse(env('MCP_APPROVAL_ARGS')) },
  undefined,
  { onprogress: (p) => progress.push(p.message || String(p.progress)), resetTimeoutOnProgress: true, timeout: 60000, maxTotalTimeout: 120000 },
);
out({ step: 'approved', isError: !!approved.isError, text: textOf(approved), progress });

// Cancelled while it waits: the SDK sends notifications/cancelled.
const ac = new AbortController();
let pending = 0;
try {
  await client.callTool(
    { name: env('MCP_APPROVAL_TOOL'), arguments: JSON.parse(env('MCP_APPROVAL_ARGS')) },
    undefined,
    {
      onprogress: () => {
        if (++pending === 2) ac.abort('the agent gave up');
      },
      signal: ac.signal,
      resetTimeoutOnProgress: true,
      timeout: 60000,
    },
  );
  out({ step: 'cancelled', error: null });
} catch (e) {
  out({ step: 'cancelled', error: String(e && e.message ? e.message : e), progress: pending });
}
// notifications/cancelled goes out asynchronously: let it leave first.
await sleep(300);
await transport.terminateSession();
await client.close();
out({ step: 'closed' });
