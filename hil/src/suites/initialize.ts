/**
 * `initialize`: the reply's shape, the protocol version the firmware always answers, the
 * board's identity (the flashed build and the variant), and a second `initialize` carrying
 * the vision capability (docs/protocol.md §3.1).
 */
import { isDeepStrictEqual } from 'node:util';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { type CheckSpec, expectThat } from '../suite.js';
import { PROTOCOL_VERSION } from './firmware-facts.js';
import { isRecord, requestOptions, SuiteChecks, skip } from './support.js';

/** The firmware never negotiates: every reply says this (docs/protocol.md §3.1, §10.8). */
export const FIRMWARE_PROTOCOL_VERSION = PROTOCOL_VERSION;

/** Where the vision check points the board; nothing is posted there unless a photo is taken. */
const VISION_PROBE = { url: 'http://127.0.0.1:9/hil/vision/explain', token: 'hil-probe' };

export const INITIALIZE_CHECKS = {
  replyShape: {
    id: 'reply-shape',
    description:
      'initialize answers with protocolVersion, capabilities.tools and serverInfo {name, version}',
    severity: 'critical',
  },
  protocolVersion: {
    id: 'protocol-version',
    description: `protocolVersion is ${FIRMWARE_PROTOCOL_VERSION}`,
    severity: 'major',
  },
  version: {
    id: 'version',
    description: 'serverInfo.version is the version of the build under test',
    severity: 'critical',
  },
  variant: {
    id: 'variant',
    description:
      "serverInfo.name is the board variant (BOARD_NAME) of the inventory and of the flashed image's board marker",
    severity: 'major',
  },
  vision: {
    id: 'vision',
    description: 'a second initialize with the vision capability is accepted with the same reply',
    severity: 'major',
  },
} as const satisfies Record<string, CheckSpec>;

function initializeParams(capabilities: Record<string, unknown>): Record<string, unknown> {
  return {
    protocolVersion: FIRMWARE_PROTOCOL_VERSION,
    capabilities,
    clientInfo: { name: 'hil', version: '0.1.0' },
  };
}

/** What is wrong with an initialize result's shape; empty when it is right. */
function shapeProblems(result: unknown): string[] {
  if (!isRecord(result)) return [`result is ${JSON.stringify(result)}, not an object`];
  const problems: string[] = [];
  if (typeof result.protocolVersion !== 'string') problems.push('protocolVersion is not a string');
  if (!isRecord(result.capabilities)) problems.push('capabilities is not an object');
  else if (!isRecord(result.capabilities.tools))
    problems.push('capabilities.tools is not an object');
  if (!isRecord(result.serverInfo)) problems.push('serverInfo is not an object');
  else {
    if (typeof result.serverInfo.name !== 'string')
      problems.push('serverInfo.name is not a string');
    if (typeof result.serverInfo.version !== 'string')
      problems.push('serverInfo.version is not a string');
  }
  return problems;
}

function serverInfoField(result: unknown, field: 'name' | 'version'): unknown {
  return isRecord(result) && isRecord(result.serverInfo) ? result.serverInfo[field] : undefined;
}

export const initializeSuite: Suite = {
  name: 'initialize',
  description: 'initialize: reply shape, protocol version, board identity, vision capability',
  async run(context: SuiteContext): Promise<SuiteOutcome> {
    const run = new SuiteChecks('initialize', context);
    let reply: { result: unknown } | undefined;
    const first = () =>
      reply ?? skip('initialize got no reply to inspect (see initialize.reply-shape)');

    await run.check(INITIALIZE_CHECKS.replyShape, async () => {
      const result = await context
        .session()
        .request('initialize', initializeParams({}), requestOptions(context));
      reply = { result };
      const problems = shapeProblems(result);
      expectThat(
        problems.length === 0,
        `expected {protocolVersion, capabilities: {tools: {}}, serverInfo: {name, version}}, got ${JSON.stringify(result)}: ${problems.join('; ')}`,
        'protocolVersion, capabilities.tools, serverInfo.name and serverInfo.version',
        JSON.stringify(result),
      );
      return `serverInfo ${JSON.stringify(serverInfoField(result, 'name'))} ${JSON.stringify(serverInfoField(result, 'version'))}`;
    });

    await run.check(INITIALIZE_CHECKS.protocolVersion, async () => {
      const { result } = first();
      const actual = isRecord(result) ? result.protocolVersion : undefined;
      expectThat(
        actual === FIRMWARE_PROTOCOL_VERSION,
        `expected protocolVersion "${FIRMWARE_PROTOCOL_VERSION}", got ${JSON.stringify(actual)}`,
        FIRMWARE_PROTOCOL_VERSION,
        String(actual),
      );
      return FIRMWARE_PROTOCOL_VERSION;
    });

    await run.check(INITIALIZE_CHECKS.version, async () => {
      const expected = context.board.expectedVersion;
      const { result } = first();
      const actual = serverInfoField(result, 'version');
      if (expected === undefined) {
        skip(
          `no expected version (this run flashed no image); the board reports ${JSON.stringify(actual)}`,
        );
      }
      expectThat(
        actual === expected,
        `expected serverInfo.version "${expected}" (the build under test), got ${JSON.stringify(actual)}`,
        expected,
        String(actual),
      );
      return `runs ${expected}`;
    });

    await run.check(INITIALIZE_CHECKS.variant, async () => {
      const { variant, imageBoard } = context.board;
      const { result } = first();
      const actual = serverInfoField(result, 'name');
      if (variant === undefined && imageBoard === undefined) {
        skip(
          `neither the inventory nor a flashed image names a variant; the board reports ${JSON.stringify(actual)}`,
        );
      }
      // A build for another board flashed here: whatever the board answers, one of them differs.
      const sources = [
        ...(variant === undefined ? [] : [{ what: 'the inventory variant', name: variant }]),
        ...(imageBoard === undefined
          ? []
          : [{ what: "the flashed image's board", name: imageBoard }]),
      ];
      const wrong = sources.filter((source) => source.name !== actual);
      const expected = [...new Set(sources.map((source) => source.name))].join(' = ');
      expectThat(
        wrong.length === 0,
        `expected serverInfo.name ${sources.map((s) => `"${s.name}" (${s.what})`).join(' and ')}, got ${JSON.stringify(actual)}`,
        expected,
        String(actual),
      );
      return `variant ${actual}${imageBoard === undefined ? '' : ', the image built for it'}`;
    });

    await run.check(INITIALIZE_CHECKS.vision, async () => {
      const { result } = first();
      const second = await context
        .session()
        .request('initialize', initializeParams({ vision: VISION_PROBE }), requestOptions(context));
      expectThat(
        isDeepStrictEqual(second, result),
        `expected the same reply as without vision (${JSON.stringify(result)}), got ${JSON.stringify(second)}`,
        JSON.stringify(result),
        JSON.stringify(second),
      );
      return 'accepted, same reply';
    });

    return { checks: run.checks };
  },
};
