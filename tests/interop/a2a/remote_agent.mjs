// A remote A2A agent written with @a2a-js/sdk 1.3 (v1.0, and v0.3 through
// its legacyCompat), which internal/e2e/a2a_interop_test.go registers with
// agentplane as protocol "a2a" and invokes through agentplane's A2A client.
//
//   node remote_agent.mjs [--no-streaming]
//
// It listens on a free loopback port and prints "listening <base URL>".
// Behaviour by the first word of the message: "weather" asks "Which city?"
// (input-required) and completes the same task with "Sunny in <answer>";
// "slow" works until cancelled; anything else answers "one two three" in
// three artifact chunks. GET /observed tells the test which tasks were
// continued and which were cancelled.
import express from 'express';
import { TaskState, Role } from '@a2a-js/sdk';
import { DefaultRequestHandler, InMemoryTaskStore, AgentEvent } from '@a2a-js/sdk/server';
import { agentCardHandler, jsonRpcHandler, UserBuilder } from '@a2a-js/sdk/server/express';

const streaming = !process.argv.includes('--no-streaming');
const observed = { continued: [], cancelled: [] };
const running = new Map(); // task id -> resolve of its wait

const textPart = (value) => ({ content: { $case: 'text', value }, metadata: undefined, filename: '', mediaType: 'text/plain' });
const message = (taskId, contextId, value) => ({
  messageId: crypto.randomUUID(), role: Role.ROLE_AGENT, parts: [textPart(value)], taskId, contextId, extensions: [], metadata: {}, referenceTaskIds: [],
});
const status = (taskId, contextId, state, msg) =>
  AgentEvent.statusUpdate({ taskId, contextId, status: { state, message: msg, timestamp: new Date().toISOString() }, metadata: {} });
const chunk = (taskId, contextId, artifactId, value, append) =>
  AgentEvent.artifactUpdate({ taskId, contextId, append, lastChunk: false, metadata: undefined,
    artifact: { artifactId, name: 'answer', description: '', parts: [textPart(value)], metadata: undefined, extensions: [] } });

class Weather {
  async execute(ctx, bus) {
    const { taskId, contextId, userMessage, task } = ctx;
    const input = userMessage.parts.map((p) => p.content?.value ?? '').join('');
    if (task) {
      observed.continued.push(taskId);
      // A streamed answer must start with the task (the SDK's handler
      // refuses anything else first).
      bus.publish(AgentEvent.task({ ...task, status: { state: TaskState.TASK_STATE_WORKING, message: undefined, timestamp: new Date().toISOString() } }));
      bus.publish(chunk(taskId, contextId, crypto.randomUUID(), 'Sunny in ' + input, false));
      bus.publish(status(taskId, contextId, TaskState.TASK_STATE_COMPLETED));
      return;
    }
    bus.publish(AgentEvent.task({ id: taskId, contextId, history: [userMessage], artifacts: [], metadata: {},
      status: { state: TaskState.TASK_STATE_SUBMITTED, message: undefined, timestamp: new Date().toISOString() } }));
    if (input.startsWith('weather')) {
      bus.publish(status(taskId, contextId, TaskState.TASK_STATE_INPUT_REQUIRED, message(taskId, contextId, 'Which city?')));
      return;
    }
    if (input.startsWith('slow')) {
      const artifactId = crypto.randomUUID();
      bus.publish(chunk(taskId, contextId, artifactId, 'working', false));
      const cancelled = await new Promise((resolve) => {
        running.set(taskId, resolve);
        setTimeout(() => resolve(false), 60000);
      });
      running.delete(taskId);
      bus.publish(status(taskId, contextId, cancelled ? TaskState.TASK_STATE_CANCELED : TaskState.TASK_STATE_COMPLETED));
      return;
    }
    const artifactId = crypto.randomUUID();
    ['one ', 'two ', 'three'].forEach((w, i) => bus.publish(chunk(taskId, contextId, artifactId, w, i > 0)));
    bus.publish(status(taskId, contextId, TaskState.TASK_STATE_COMPLETED));
  }

  // Signals execute(), which publishes the terminal CANCELED event the
  // handler waits for.
  async cancelTask(taskId) {
    observed.cancelled.push(taskId);
    running.get(taskId)?.(true);
  }
}

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const base = `http://127.0.0.1:${server.address().port}/a2a`;
  const iface = (protocolVersion) => ({ url: base, protocolBinding: 'JSONRPC', tenant: '', protocolVersion });
  const card = {
    name: 'JS weather', description: 'A remote A2A agent written with @a2a-js/sdk', version: '1.0.0',
    // v0.3 is declared per interface, else v0.3 requests are refused.
    supportedInterfaces: [iface('1.0'), iface('0.3')],
    capabilities: { streaming, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {}, securityRequirements: [],
    defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'],
    skills: [{ id: 'weather', name: 'weather', description: 'the weather', tags: ['weather'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    documentationUrl: '', signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Weather());
  app.get('/observed', (_req, res) => res.json(observed));
  app.use('/a2a/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler, legacyCompat: { enabled: true } }));
  app.use('/a2a', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: { enabled: true } }));
  console.log(`listening ${base}`);
});
