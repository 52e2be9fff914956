/**
 * `audio`: over MQTT + UDP (docs/protocol.md §5), a BOOT click opens an audio session: the board
 * publishes a hello (transport `udp`), our server answers with its UDP endpoint, key and nonce,
 * and the board streams AES-128-CTR packets whose 16-byte header is also the IV. The server
 * decrypts and counts them per session; this suite reads those counts and holds them to the
 * wire's rules: packets arrived, numbered from 1, none missing, none late, none refused.
 *
 * The expectations are this file's own literals (the first sequence number, what "in order"
 * means), read from docs/protocol.md §5 and the firmware's `MqttProtocol::SendAudio`; the
 * counting is the server's, so a wrong rule there cannot pass its own check. Boards on
 * WebSocket, boards nobody can click, and boards that open no audio session are skipped.
 */
import type { AudioSessionStats } from '@xiaozhi-mcp/server';
import type { Suite, SuiteContext, SuiteOutcome } from '../suite.js';
import { CheckFailure, type CheckSpec } from '../suite.js';
import { isRecord, SuiteChecks, skip } from './support.js';

export const AUDIO_CHECKS = {
  uplink: {
    id: 'uplink',
    description:
      'over MQTT, a BOOT click opens an audio session whose encrypted UDP packets arrive, decrypted, in order: some packets, numbered from 1, no gaps, none out of order or refused',
    severity: 'major',
  },
} as const satisfies Record<string, CheckSpec>;

/** The transport whose audio goes over UDP (docs/protocol.md §5). */
const MQTT = 'mqtt';
/** A hello's `type` (docs/protocol.md §5). */
const HELLO = 'hello';
/**
 * The first packet of a session carries sequence 1: the firmware counts `++local_sequence_`
 * from 0 per audio channel (`MqttProtocol::SendAudio`; docs/protocol.md §5).
 */
const FIRST_SEQUENCE = 1;

export const NOT_OVER_WEBSOCKET = 'audio over WebSocket is not judged';
export const NO_AUDIO_SESSION = 'this board does not stream audio when a session opens';

/** How long each part of the audio session may take. */
export interface AudioBounds {
  /** From the click to the board's hello (a board answers a click at once). */
  readonly helloMs: number;
  /** From the board's hello to the server's audio session showing in its counts. */
  readonly openMs: number;
  /** No new packet for this long: the uplink is over. */
  readonly quietMs: number;
  /** The most audio judged: a board still streaming after this long is sent a goodbye. */
  readonly streamMs: number;
  /** How often the server's counts are read. */
  readonly pollMs: number;
}

export const AUDIO_BOUNDS: AudioBounds = {
  helloMs: 10_000,
  openMs: 5_000,
  quietMs: 3_000,
  streamMs: 20_000,
  pollMs: 25,
};

/** What is wrong with a session's counts, against the wire's rules; empty when nothing is. */
export function uplinkProblems(stats: AudioSessionStats): string[] {
  const problems: string[] = [];
  if (stats.packets <= 0) problems.push('no packet arrived');
  if (stats.gaps !== 0) problems.push(`${stats.gaps} sequence number(s) missing`);
  if (stats.outOfOrder !== 0) problems.push(`${stats.outOfOrder} packet(s) out of order`);
  if (stats.rejected !== 0) problems.push(`${stats.rejected} packet(s) refused`);
  if (stats.packets > 0 && stats.firstSequence !== FIRST_SEQUENCE)
    problems.push(`the first sequence number is ${stats.firstSequence}, not ${FIRST_SEQUENCE}`);
  return problems;
}

/** The counts as failure messages and notes show them. */
export function uplinkFigures(stats: AudioSessionStats): string {
  return `packets ${stats.packets}, gaps ${stats.gaps}, out of order ${stats.outOfOrder}, rejected ${stats.rejected}, first sequence ${stats.firstSequence ?? 'none'}`;
}

const EXPECTED = `packets > 0, gaps 0, out of order 0, rejected 0, first sequence ${FIRST_SEQUENCE}`;

/** The hellos of an audio session, as they pass on the MCP session's link. */
interface Hellos {
  /** The board's hello came. */
  readonly board: Promise<void>;
  /** The session id our server's hello named, once it passed. */
  serverSessionId(): string | undefined;
  dispose(): void;
}

function watchHellos(context: SuiteContext): Hellos {
  const session = context.session();
  let serverSessionId: string | undefined;
  let heard: () => void = () => {};
  const board = new Promise<void>((resolve) => {
    heard = resolve;
  });
  const onFrame = (dir: 'in' | 'out', text: string) => {
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      return;
    }
    if (!isRecord(value) || value.type !== HELLO) return;
    if (dir === 'in') heard();
    else if (typeof value.session_id === 'string') serverSessionId = value.session_id;
  };
  session.on('frame', onFrame);
  return {
    board,
    serverSessionId: () => serverSessionId,
    dispose: () => session.off('frame', onFrame),
  };
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Resolves true when `promise` settles within `ms`, false otherwise. */
function within(promise: Promise<void>, ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    const done = (settle: () => void) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      settle();
    };
    const onAbort = () => done(() => reject(signal.reason));
    const timer = setTimeout(() => done(() => resolve(false)), ms);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(() => done(() => resolve(true)));
  });
}

/** How the uplink ended, as the note says it. */
type Ending = 'goodbye' | 'quiet' | 'bounded';

/** The suite with its bounds (tests shorten them). */
export function audioSuiteWith(bounds: AudioBounds): Suite {
  return {
    name: 'audio',
    description:
      'audio: over MQTT, a BOOT click opens an audio session and its UDP uplink arrives in order',
    async run(context: SuiteContext): Promise<SuiteOutcome> {
      const run = new SuiteChecks('audio', context);
      await run.check(AUDIO_CHECKS.uplink, async () => {
        if (context.record().transport !== MQTT) skip(NOT_OVER_WEBSOCKET);
        const button = context.bootButton;
        if (button === undefined || 'unavailable' in button)
          skip(
            `this board cannot be clicked${button === undefined ? '' : `: ${button.unavailable}`}`,
          );
        const audioStats = context.audioStats;
        if (audioStats === undefined) skip('the rig reads no audio counts for this board');
        const before = audioStats()?.sessionId;
        const hellos = watchHellos(context);
        try {
          context.log('audio: BOOT click, waiting for an audio session');
          await button.press();
          if (!(await within(hellos.board, bounds.helloMs, context.signal)))
            skip(
              `${NO_AUDIO_SESSION} (no hello within ${bounds.helloMs / 1000} s of a BOOT click)`,
            );
          // The server's session: the one its hello named, else the first after the click.
          const mine = (stats: AudioSessionStats | undefined): stats is AudioSessionStats =>
            stats !== undefined &&
            (hellos.serverSessionId() === undefined
              ? stats.sessionId !== before
              : stats.sessionId === hellos.serverSessionId());
          const opened = performance.now();
          let stats = audioStats();
          while (!mine(stats)) {
            if (performance.now() - opened > bounds.openMs)
              throw new CheckFailure(
                `expected an audio session on our server after the board's hello, got none within ${bounds.openMs / 1000} s`,
                'an audio session',
                'none',
              );
            await sleep(bounds.pollMs, context.signal);
            stats = audioStats();
          }
          let ending: Ending | undefined;
          let packets = stats.packets;
          let lastPacketAt = performance.now();
          while (ending === undefined) {
            if (!stats.open) ending = 'goodbye';
            else if (performance.now() - lastPacketAt > bounds.quietMs) ending = 'quiet';
            else if (performance.now() - opened > bounds.streamMs) ending = 'bounded';
            else {
              await sleep(bounds.pollMs, context.signal);
              const next = audioStats();
              // Another session replaced it: this one is over.
              if (!mine(next)) ending = 'goodbye';
              else stats = next;
              if (stats.packets !== packets) {
                packets = stats.packets;
                lastPacketAt = performance.now();
              }
            }
          }
          // A board still listening is told the session is over.
          if (stats.open) context.endAudioSession?.();
          const problems = uplinkProblems(stats);
          const figures = uplinkFigures(stats);
          if (problems.length > 0)
            throw new CheckFailure(
              `expected the uplink in order (${EXPECTED}), got ${problems.join(', ')} (${figures})`,
              EXPECTED,
              figures,
            );
          const how =
            ending === 'goodbye'
              ? 'the board said goodbye'
              : ending === 'quiet'
                ? `no packet for ${bounds.quietMs / 1000} s`
                : `ended by our goodbye after ${bounds.streamMs / 1000} s`;
          return {
            note: `${stats.packets} packets (${stats.bytes} bytes) decrypted in order, sequence ${stats.firstSequence}..${stats.lastSequence}; ${how}`,
            data: {
              packets: stats.packets,
              bytes: stats.bytes,
              gaps: stats.gaps,
              outOfOrder: stats.outOfOrder,
              rejected: stats.rejected,
              firstSequence: stats.firstSequence,
              lastSequence: stats.lastSequence,
            },
          };
        } finally {
          hellos.dispose();
        }
      });
      return { checks: run.checks };
    },
  };
}

export const audioSuite: Suite = audioSuiteWith(AUDIO_BOUNDS);
