/**
 * Malformed and unusual requests (docs/protocol.md §2, §10), sent raw, observed on the wire. A
 * dropped request produces nothing, so each probe is followed by a barrier request: the
 * device answers in arrival order (a successful call takes one more hop than anything
 * else), so when the first reply after a probe is the barrier's, the probe got none.
 *
 * Three checks hold the spec's behaviour against the firmware's known deviations (error
 * codes, escaped messages, `ping`); they fail on today's firmware and the default baseline
 * lists them.
 */
import { encodeRequest } from '@xiaozhi-mcp/protocol';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { CheckFailure, type CheckSpec, expectThat, NO_REPLY } from '../suite.js';
import { CALL_ERRORS, methodNotImplemented } from './firmware-facts.js';
import {
  exchange,
  hasTool,
  preview,
  REPLY_TIMEOUT_MS,
  replyId,
  requestOptions,
  SuiteChecks,
  type WireReply,
} from './support.js';
import { STATUS_TOOL } from './tools-call.js';

/** A tool name the firmware echoes unescaped into its error message. */
export const QUOTED_TOOL_NAME = 'self.hil."quoted"\\name';
const UNKNOWN_METHOD = 'resources/list';
// Ids far above the session's own counter, so no reply can settle one of its requests.
const FIRST_PROBE_ID = 1_900_000_000;

export const ROBUSTNESS_CHECKS = {
  stringId: {
    id: 'string-id',
    description: 'requests whose id is a string, null or missing are dropped',
    severity: 'major',
  },
  wrongJsonrpc: {
    id: 'wrong-jsonrpc',
    description: 'requests whose jsonrpc is not exactly "2.0" are dropped',
    severity: 'major',
  },
  paramsNotObject: {
    id: 'params-not-object',
    description: 'requests whose params is null or an array are dropped (tools/call included)',
    severity: 'major',
  },
  notificationWithId: {
    id: 'notification-with-id',
    description: 'notifications/* methods are dropped even when they carry an id',
    severity: 'major',
  },
  notification: {
    id: 'notification',
    description: 'notifications/initialized gets no reply',
    severity: 'major',
  },
  stringPayload: {
    id: 'string-payload',
    description: 'an envelope whose payload is a JSON string is dropped',
    severity: 'minor',
  },
  numericIds: {
    id: 'numeric-ids',
    description: 'ids are read as a C int: fractions truncated, out-of-range values saturated',
    severity: 'minor',
  },
  unknownMethod: {
    id: 'unknown-method',
    description: `an unknown method gets the error "Method not implemented: <method>"`,
    severity: 'major',
  },
  quotedToolName: {
    id: 'quoted-tool-name',
    description:
      'a tool name with quotes and backslashes gets "Unknown tool: <name>", readable, with its id',
    severity: 'major',
  },
  errorCode: {
    id: 'error-code',
    description: 'error replies carry a JSON-RPC code (e.g. -32601 for an unknown method)',
    severity: 'minor',
  },
  escapedMessages: {
    id: 'escaped-messages',
    description: 'error messages are JSON-escaped: a tool named with quotes gives valid JSON',
    severity: 'major',
  },
  ping: {
    id: 'ping',
    description: 'the MCP ping method is answered with a result',
    severity: 'minor',
  },
  alive: {
    id: 'alive',
    description: 'the board still answers initialize after every probe',
    severity: 'critical',
  },
} as const satisfies Record<string, CheckSpec>;

/** A payload text from a JSON value, or as given when it must be exactly that text. */
function text(value: unknown): string {
  return typeof value === 'string' ? value : JSON.stringify(value);
}

function describeReply(reply: WireReply): string {
  return preview(reply.payloadText, 200);
}

export const robustnessSuite: Suite = {
  name: 'robustness',
  description: 'malformed requests are dropped or answered as the firmware defines',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('robustness', context);
    let nextId = FIRST_PROBE_ID;
    const newId = () => nextId++;
    // A successful call when the board has a safe tool (two hops: after anything a probe
    // could have caused), else initialize (one hop, after any one-hop reply).
    const barrierPayload = (id: number) =>
      hasTool(context, STATUS_TOOL)
        ? encodeRequest(id, 'tools/call', { name: STATUS_TOOL, arguments: {} })
        : encodeRequest(id, 'initialize', { capabilities: {} });

    /** Sends the probes, then a barrier; resolves with every reply up to the barrier's. */
    const probe = async (payloads: readonly string[]) => {
      const barrier = newId();
      const replies = await exchange(
        context.session(),
        [...payloads, barrierPayload(barrier)],
        (reply) => replyId(reply) === barrier,
        `the reply to the barrier request (id ${barrier}): the board stopped answering`,
        REPLY_TIMEOUT_MS,
      );
      return { barrier, replies };
    };

    /** Passes when the probes got no reply at all. */
    const expectDropped = async (probes: readonly unknown[]) => {
      const { barrier, replies } = await probe(probes.map(text));
      const answered = replies.filter((reply) => replyId(reply) !== barrier);
      expectThat(
        answered.length === 0,
        `expected no reply (the firmware drops these), got ${answered.map(describeReply).join(', ')}`,
        'no reply before the barrier',
        answered.map(describeReply).join(', '),
      );
      return `${probes.length} probe(s) dropped; the barrier was answered`;
    };

    /** The reply to one request (by id), with the replies that came before it. */
    const answerTo = async (payload: unknown, id: number) => {
      const { replies } = await probe([text(payload)]);
      const reply = replies.find((r) => replyId(r) === id);
      if (reply === undefined) {
        throw new CheckFailure(
          `expected a reply with id ${id}, got none before the barrier's${replies.length > 1 ? ` (other replies: ${replies.slice(0, -1).map(describeReply).join(', ')})` : ''}`,
          `a reply with id ${id}`,
          'no reply',
          NO_REPLY,
        );
      }
      return reply;
    };

    // Probes shared by several checks, sent once.
    const once = <T>(make: () => Promise<T>) => {
      let promise: Promise<T> | undefined;
      return () => {
        promise ??= make();
        return promise;
      };
    };
    const unknownMethodId = newId();
    const unknownMethodReply = once(() =>
      answerTo(
        { jsonrpc: '2.0', id: unknownMethodId, method: UNKNOWN_METHOD, params: {} },
        unknownMethodId,
      ),
    );
    const quotedId = newId();
    const quotedReply = once(() =>
      answerTo(
        {
          jsonrpc: '2.0',
          id: quotedId,
          method: 'tools/call',
          params: { name: QUOTED_TOOL_NAME, arguments: {} },
        },
        quotedId,
      ),
    );

    await run.check(ROBUSTNESS_CHECKS.stringId, () =>
      expectDropped([
        { jsonrpc: '2.0', id: String(newId()), method: 'initialize', params: {} },
        { jsonrpc: '2.0', id: null, method: 'initialize', params: {} },
        { jsonrpc: '2.0', method: 'initialize', params: {} },
        { jsonrpc: '2.0', id: String(newId()), method: 'tools/list', params: {} },
      ]),
    );

    await run.check(ROBUSTNESS_CHECKS.wrongJsonrpc, () =>
      expectDropped([
        { jsonrpc: '1.0', id: newId(), method: 'initialize', params: {} },
        { id: newId(), method: 'initialize', params: {} },
        `{"jsonrpc":2.0,"id":${newId()},"method":"initialize","params":{}}`,
      ]),
    );

    await run.check(ROBUSTNESS_CHECKS.paramsNotObject, () =>
      expectDropped([
        { jsonrpc: '2.0', id: newId(), method: 'tools/list', params: null },
        { jsonrpc: '2.0', id: newId(), method: 'tools/call', params: null },
        { jsonrpc: '2.0', id: newId(), method: 'initialize', params: [] },
      ]),
    );

    await run.check(ROBUSTNESS_CHECKS.notificationWithId, () =>
      expectDropped([
        { jsonrpc: '2.0', id: newId(), method: 'notifications/initialized' },
        {
          jsonrpc: '2.0',
          id: newId(),
          method: 'notifications/cancelled',
          params: { requestId: 1 },
        },
      ]),
    );

    await run.check(ROBUSTNESS_CHECKS.notification, () =>
      expectDropped([{ jsonrpc: '2.0', method: 'notifications/initialized' }]),
    );

    await run.check(ROBUSTNESS_CHECKS.stringPayload, () =>
      // The payload is a JSON string holding a request: the device passes on objects only.
      expectDropped([JSON.stringify(encodeRequest(newId(), 'initialize', { capabilities: {} }))]),
    );

    await run.check(ROBUSTNESS_CHECKS.numericIds, async () => {
      const base = newId();
      const cases = [
        { sent: `${base}.75`, expected: base },
        { sent: '1e12', expected: 2_147_483_647 },
        { sent: '-1e12', expected: -2_147_483_648 },
      ];
      const problems: string[] = [];
      for (const { sent, expected } of cases) {
        const { replies } = await probe([
          `{"jsonrpc":"2.0","id":${sent},"method":"initialize","params":{}}`,
        ]);
        const first = replies[0];
        const id = first === undefined ? undefined : replyId(first);
        if (id !== expected) {
          problems.push(
            `id ${sent}: expected a reply with id ${expected}, got ${first === undefined ? 'none' : describeReply(first)}`,
          );
        }
      }
      expectThat(
        problems.length === 0,
        problems.join('; '),
        'ids truncated and saturated as a C int',
        problems[0],
      );
      return 'fraction truncated, 1e12 and -1e12 saturated';
    });

    await run.check(ROBUSTNESS_CHECKS.unknownMethod, async () => {
      const reply = await unknownMethodReply();
      const expected = methodNotImplemented(UNKNOWN_METHOD);
      const { message } = reply;
      expectThat(
        message.kind === 'error' && message.error.message === expected,
        `expected the error "${expected}", got ${describeReply(reply)}`,
        expected,
        describeReply(reply),
      );
      return expected;
    });

    await run.check(ROBUSTNESS_CHECKS.quotedToolName, async () => {
      const reply = await quotedReply();
      const expected = CALL_ERRORS.unknownTool(QUOTED_TOOL_NAME);
      const { message } = reply;
      expectThat(
        message.kind === 'error' && message.error.message === expected,
        `expected the error "${expected}" (recovered if unescaped), got ${describeReply(reply)}`,
        expected,
        describeReply(reply),
      );
      return message.error.recovered
        ? 'unescaped reply (invalid JSON), id and message recovered'
        : 'escaped reply';
    });

    await run.check(ROBUSTNESS_CHECKS.errorCode, async () => {
      const reply = await unknownMethodReply();
      const { message } = reply;
      expectThat(
        message.kind === 'error',
        `expected an error reply to ${UNKNOWN_METHOD}, got ${describeReply(reply)}`,
      );
      expectThat(
        !message.error.codeless,
        `expected error replies to carry a numeric JSON-RPC code (e.g. -32601), got one without: ${describeReply(reply)}`,
        'error.code, a number',
        describeReply(reply),
        'error reply without code',
      );
      return `code ${message.error.code}`;
    });

    await run.check(ROBUSTNESS_CHECKS.escapedMessages, async () => {
      const reply = await quotedReply();
      let valid = true;
      try {
        JSON.parse(reply.payloadText);
      } catch {
        valid = false;
      }
      expectThat(
        valid,
        `expected a valid JSON error reply with the tool name escaped, got invalid JSON: ${describeReply(reply)}`,
        'valid JSON',
        describeReply(reply),
        'error reply that is invalid JSON',
      );
      const { message } = reply;
      expectThat(
        message.kind === 'error' && message.error.message.includes(QUOTED_TOOL_NAME),
        `expected an error naming ${QUOTED_TOOL_NAME}, got ${describeReply(reply)}`,
        QUOTED_TOOL_NAME,
        describeReply(reply),
      );
      return 'valid JSON, the name intact';
    });

    await run.check(ROBUSTNESS_CHECKS.ping, async () => {
      const id = newId();
      const reply = await answerTo({ jsonrpc: '2.0', id, method: 'ping' }, id);
      const { message } = reply;
      expectThat(
        message.kind === 'result',
        `expected a result to ping, got ${describeReply(reply)}`,
        'a result ({})',
        describeReply(reply),
        message.kind === 'error' ? `error reply "${message.error.message}"` : undefined,
      );
      return 'answered with a result';
    });

    await run.check(ROBUSTNESS_CHECKS.alive, async () => {
      const result = await context.session().initialize(undefined, requestOptions(context));
      return `initialize answered (${result.serverInfo.name} ${result.serverInfo.version})`;
    });

    return { checks: run.checks };
  },
};
