import { describe, expect, it } from 'vitest';
import {
  INITIAL_SERVER_RESET_STATE,
  planServerReset,
  type ServerResetState,
  type ServerResetStep,
} from './server-resets.js';

/**
 * The caller's line states, one `set()` each, as `runLineSteps` plays esptool's sequences
 * through an RFC 2217 port (`linePlatform: 'win32'`: a change of both lines goes through the
 * safe state between), written out here as DTR,RTS pairs; waits send nothing and are left out.
 */
function plan(states: readonly string[], from: ServerResetState = INITIAL_SERVER_RESET_STATE) {
  let state = from;
  const sent: string[] = [];
  for (const text of states) {
    const [dtr, rts] = text.split(',').map((v) => v === '1');
    const result = planServerReset(state, { dtr: dtr === true, rts: rts === true });
    state = result.state;
    sent.push(...result.steps.map(show));
  }
  return { sent, state };
}

function show(step: ServerResetStep): string {
  if ('waitMs' in step) return `W${step.waitMs}`;
  return `${step.line === 'dtr' ? 'D' : 'R'}${step.on ? 1 : 0}`;
}

// esp_rfc2217_server: D0 clears its download mode, D1 plays its download reset, R0 its hard
// reset; a plain PortManager plays the same as ClassicReset (`esptool/reset.py`
// D0|R1|W0.1|D1|R0) and a hard reset.
// Then 650 ms for the server's own reset: 100 ms in reset and esptool's longest reset delay,
// 550 ms (reset.py DEFAULT_RESET_DELAY 0.05, + 0.5 with esp_rfc2217_server's --r0).
const DOWNLOAD = ['D0', 'R1', 'W100', 'D1', 'R0', 'W650'];

describe('planServerReset: esptool sequences to a server that plays resets itself', () => {
  it('sends nothing for the release after open', () => {
    expect(plan(['0,0']).sent).toEqual([]);
  });

  it('ClassicReset (0,0) (0,1) (1,1) (1,0) (0,0): reset, then D1 and R0 and a wait; its final D0 is not sent', () => {
    expect(plan(['0,0', '0,1', '1,1', '1,0', '0,0'])).toEqual({
      sent: ['D0', 'R1', 'D1', 'R0', 'W650'],
      state: { intent: { dtr: false, rts: false }, phase: 'pass' },
    });
  });

  it('UnixTightReset through a one-line-at-a-time port: one download reset for the whole sequence', () => {
    // (0,0) (1,1) (0,1) W (1,0) W (0,0), each two-line change through (1,0) or (1,1).
    expect(plan(['0,0', '1,0', '1,1', '0,1', '1,1', '1,0', '0,0']).sent).toEqual(DOWNLOAD);
  });

  it('USBJTAGSerialReset: one download reset at its D1', () => {
    // R0|D0|W0.1|D1|R0|W0.1|R1|D0|R1|W0.1|R0|D0
    expect(plan(['0,0', '0,0', '1,0', '1,0', '1,1', '0,1', '0,1', '0,0', '0,0']).sent).toEqual(
      DOWNLOAD,
    );
  });

  it('HardReset (0,1) W (0,0): D0 and R1 at the start, R0 at the release', () => {
    expect(plan(['0,1', '0,0']).sent).toEqual(['D0', 'R1', 'R0']);
  });

  it('every connect attempt resets again, and the hard reset after the write reaches the chip', () => {
    const first = plan(['0,0', '1,0', '1,1', '0,1', '1,1', '1,0', '0,0']);
    const second = plan(['0,0', '0,1', '1,1', '1,0', '0,0'], first.state);
    const hard = plan(['0,1', '0,0'], second.state);
    expect([first.sent, second.sent, hard.sent]).toEqual([
      DOWNLOAD,
      ['D0', 'R1', 'D1', 'R0', 'W650'],
      ['D0', 'R1', 'R0'],
    ]);
  });

  it('a caller that never releases stays inside its download reset, sending nothing more', () => {
    expect(plan(['1,0', '1,1', '0,1', '1,1', '0,1']).sent).toEqual(DOWNLOAD);
  });
});
