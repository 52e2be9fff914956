/**
 * `audio.uplink` against literal counts: what the server would report for an audio session, and
 * what the board did on the MCP link after the click (its hello, or none). No board, no server:
 * the check's rules alone.
 */
import { EventEmitter } from 'node:events';
import type { AudioSessionStats, DeviceRecord, DeviceSession } from '@xiaozhi-mcp/server';
import { describe, expect, it } from 'vitest';
import type { CheckResult } from '../model.js';
import type { BootButton, SuiteContext } from '../suite.js';
import { type AudioBounds, audioSuiteWith, uplinkProblems } from './audio.js';

const BOUNDS: AudioBounds = { helloMs: 300, openMs: 300, quietMs: 150, streamMs: 3000, pollMs: 5 };

/** A session of 10 packets, numbered 1 to 10, closed by the board's goodbye. */
const CLEAN: AudioSessionStats = {
  deviceId: 'f4:12:fa:00:00:01',
  sessionId: 'S1',
  ssrc: 0x0102_0304,
  packets: 10,
  bytes: 400,
  gaps: 0,
  outOfOrder: 0,
  rejected: 0,
  firstSequence: 1,
  lastSequence: 10,
  open: false,
  openedAt: '2026-01-01T00:00:00.000Z',
  closedAt: '2026-01-01T00:00:01.000Z',
};

interface Fake {
  /** The server's counts once the board's hello was answered (undefined: no session). */
  readonly stats?: AudioSessionStats;
  /** The board answers the click with a hello. */
  readonly hello?: boolean;
  readonly transport?: 'websocket' | 'mqtt';
  readonly bootButton?: BootButton;
}

/** A context whose click makes the fake board say hello and the fake server count `stats`. */
function contextFor(fake: Fake): SuiteContext & { presses: number; ended: number } {
  const link = new EventEmitter();
  let counted: AudioSessionStats | undefined;
  const context = {
    presses: 0,
    ended: 0,
    board: { name: 'fake' },
    deviceId: CLEAN.deviceId,
    session: () => link as unknown as DeviceSession,
    record: () => ({ transport: fake.transport ?? 'mqtt' }) as DeviceRecord,
    bootButton: fake.bootButton ?? {
      press: async () => {
        context.presses++;
        if (fake.hello === false) return;
        link.emit(
          'frame',
          'in',
          '{"type":"hello","version":3,"transport":"udp","features":{"mcp":true}}',
        );
        link.emit('frame', 'out', `{"type":"hello","transport":"udp","session_id":"S1"}`);
        counted = fake.stats;
      },
    },
    audioStats: () => counted,
    endAudioSession: () => {
      context.ended++;
      return true;
    },
    log: () => {},
    signal: new AbortController().signal,
  } as unknown as SuiteContext & { presses: number; ended: number };
  return context;
}

async function uplink(fake: Fake): Promise<CheckResult & { presses: number; ended: number }> {
  const context = contextFor(fake);
  const { checks } = await audioSuiteWith(BOUNDS).run(context);
  const [check] = checks;
  if (check === undefined) throw new Error('no check');
  expect(check.id).toBe('audio.uplink');
  return { ...check, presses: context.presses, ended: context.ended };
}

describe('audio.uplink', () => {
  it('passes a session whose packets arrived numbered 1, 2, 3, ... with nothing missing', async () => {
    const check = await uplink({ stats: CLEAN });
    expect(check).toMatchObject({
      status: 'passed',
      message: '10 packets (400 bytes) decrypted in order, sequence 1..10; the board said goodbye',
      data: { packets: 10, gaps: 0, outOfOrder: 0, rejected: 0, firstSequence: 1 },
    });
    expect(check.presses).toBe(1);
    expect(check.ended).toBe(0);
  });

  it('fails missing sequence numbers, with the numbers', async () => {
    const check = await uplink({ stats: { ...CLEAN, packets: 8, gaps: 2 } });
    expect(check).toMatchObject({
      status: 'failed',
      expected: 'packets > 0, gaps 0, out of order 0, rejected 0, first sequence 1',
      actual: 'packets 8, gaps 2, out of order 0, rejected 0, first sequence 1',
    });
    expect(check.message).toMatch(/got 2 sequence number\(s\) missing/);
  });

  it('fails packets out of order', async () => {
    const check = await uplink({ stats: { ...CLEAN, outOfOrder: 1 } });
    expect(check.status).toBe('failed');
    expect(check.message).toMatch(/1 packet\(s\) out of order/);
  });

  it('fails refused packets, and a session that does not start at sequence 1', async () => {
    expect((await uplink({ stats: { ...CLEAN, rejected: 3 } })).message).toMatch(
      /3 packet\(s\) refused/,
    );
    expect((await uplink({ stats: { ...CLEAN, firstSequence: 0 } })).message).toMatch(
      /the first sequence number is 0, not 1/,
    );
  });

  it('fails a board that says hello but sends no UDP, with the numbers', async () => {
    const silent = {
      ...CLEAN,
      packets: 0,
      bytes: 0,
      firstSequence: null,
      lastSequence: null,
      open: true,
    };
    const check = await uplink({ stats: silent });
    expect(check).toMatchObject({
      status: 'failed',
      actual: 'packets 0, gaps 0, out of order 0, rejected 0, first sequence none',
    });
    expect(check.message).toMatch(/got no packet arrived/);
    // Still listening: our goodbye ends its session.
    expect(check.ended).toBe(1);
  });

  it('fails a hello our server opened no audio session for', async () => {
    const check = await uplink({});
    expect(check.status).toBe('failed');
    expect(check.message).toMatch(
      /expected an audio session on our server after the board's hello/,
    );
  });

  it('skips a board that sends no hello when clicked: it does not stream audio', async () => {
    const check = await uplink({ hello: false, stats: CLEAN });
    expect(check.status).toBe('skipped');
    expect(check.message).toMatch(/^this board does not stream audio when a session opens/);
  });

  it('skips boards on WebSocket and boards nobody can click, saying why', async () => {
    expect(await uplink({ transport: 'websocket', stats: CLEAN })).toMatchObject({
      status: 'skipped',
      message: 'audio over WebSocket is not judged',
      presses: 0,
    });
    const native = await uplink({
      stats: CLEAN,
      bootButton: { unavailable: 'it is on native USB (USB-Serial-JTAG)' },
    });
    expect(native).toMatchObject({
      status: 'skipped',
      message: 'this board cannot be clicked: it is on native USB (USB-Serial-JTAG)',
    });
  });

  it('holds the wire rules as literals: sequence numbers start at 1', () => {
    expect(uplinkProblems(CLEAN)).toEqual([]);
    expect(uplinkProblems({ ...CLEAN, firstSequence: 2, gaps: 1 })).toEqual([
      '1 sequence number(s) missing',
      'the first sequence number is 2, not 1',
    ]);
  });
});
