import { describe, expect, it } from 'vitest';
import { BoardConsole } from '../console.js';
import { BoardPanic } from '../errors.js';
import { crash, panicLines, type ShutdownHost, softReboot } from './panic.js';
import { BootSignal, Reset, type ResetReason } from './types.js';

const SHA = '0123456789abcdef0123456789abcdef';

function host(signal = new BootSignal()) {
  const events: string[] = [];
  const console = new BoardConsole();
  console.on('line', (line) => events.push(`line ${line.text}`));
  let restarted: (reason: ResetReason) => void = () => {};
  const restart = new Promise<ResetReason>((resolve) => {
    restarted = resolve;
  });
  const shutdown: ShutdownHost = {
    console,
    stopLoop: () => events.push('stop loop'),
    dropChannel: (reason) => events.push(`drop ${reason}`),
    signal,
    restart: (reason) => {
      events.push(`restart ${reason}`);
      restarted(reason);
    },
  };
  return { shutdown, events, restart };
}

describe('panicLines', () => {
  it("prints an abort's message, split at what(), and where abort() was called", () => {
    const lines = panicLines(
      new BoardPanic(
        'abort',
        "terminate called after throwing 'std::invalid_argument' what(): stoi",
      ),
      SHA,
    );
    expect(lines.slice(0, 4)).toEqual([
      "terminate called after throwing 'std::invalid_argument'",
      'stoi',
      '',
      'abort() was called at PC 0x4037a1f6 on core 1',
    ]);
    expect(lines.slice(-4)).toEqual(['', 'ELF file SHA256: 0123456789abcdef', '', 'Rebooting...']);
  });

  it('prints a Guru Meditation with the reason for a load fault', () => {
    const lines = panicLines(new BoardPanic('load-prohibited', 'null hello'), SHA);
    expect(lines[0]).toBe(
      "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
    );
    expect(lines).toContain('EXCVADDR: 0x00000000  (null hello)');
    expect(lines.filter((l) => l.startsWith('Backtrace:'))).toHaveLength(1);
  });
});

describe('going down', () => {
  it('crashes: stops the loop, drops the channel, dumps, then restarts', async () => {
    const { shutdown, events, restart } = host();
    crash(shutdown, new BoardPanic('abort', 'boom'), SHA, 0);
    expect(await restart).toBe('RTC_SW_CPU_RST');
    expect(events.slice(0, 3)).toEqual(['stop loop', 'drop panic', 'line boom']);
    expect(events.at(-2)).toBe('line Rebooting...');
  });

  it('reboots: stops the loop, says so, drops the channel, then restarts', async () => {
    const { shutdown, events, restart } = host();
    softReboot(shutdown, 0);
    await restart;
    expect(events.map((e) => e.replace(/\(\d+\) /, ''))).toEqual([
      'stop loop',
      'line I Application: Rebooting...',
      'drop reboot',
      'restart RTC_SW_CPU_RST',
    ]);
  });

  it('does not restart when a reset from outside came first', async () => {
    const reset = new BootSignal();
    const { shutdown, events } = host(reset);
    reset.abort();
    softReboot(shutdown, 0);
    await new Promise((resolve) => setImmediate(resolve));
    expect(events).not.toContain('restart RTC_SW_CPU_RST');
  });
});

describe('BootSignal', () => {
  it('ends every wait of the boot on a reset, and refuses new ones', async () => {
    const boot = new BootSignal();
    const done = boot.sleep(0);
    const first = boot.sleep(60_000);
    const second = boot.sleep(60_000);
    await done;
    boot.abort();
    expect(boot.aborted).toBe(true);
    await expect(first).rejects.toBeInstanceOf(Reset);
    await expect(second).rejects.toBeInstanceOf(Reset);
    await expect(boot.sleep(0)).rejects.toBeInstanceOf(Reset);
  });
});
