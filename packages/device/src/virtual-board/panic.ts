/**
 * How the firmware goes down: a panic (the dump ESP-IDF's panic handler prints, then a reset)
 * and `Application::Reboot` (a pause, then `esp_restart`). Either way the main loop stops, the
 * channel drops without a word, and the board restarts with `RTC_SW_CPU_RST` unless a reset
 * from outside comes first.
 */
import type { BoardConsole } from '../console.js';
import type { BoardPanic } from '../errors.js';
import type { BootSignal, ResetReason } from './types.js';

/** The panic handler's dump: an abort's message, or a Guru Meditation with its registers. */
export function panicLines(panic: BoardPanic, elfSha256: string): string[] {
  const cause =
    panic.kind === 'abort'
      ? [...panic.reason.split(' what(): '), '', 'abort() was called at PC 0x4037a1f6 on core 1']
      : [
          `Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.`,
          '',
          'Core  1 register dump:',
          'PC      : 0x42012c4e  PS      : 0x00060a30  A0      : 0x82013a6d  A1      : 0x3fcb7d10',
          `EXCVADDR: 0x00000000  (${panic.reason})`,
        ];
  return [
    ...cause,
    '',
    'Backtrace: 0x4037a1f3:0x3fcb7b90 0x4037f2a1:0x3fcb7bb0 0x42012c4b:0x3fcb7d10',
    '',
    `ELF file SHA256: ${elfSha256.slice(0, 16)}`,
    '',
    'Rebooting...',
  ];
}

/** What going down needs from the board. */
export interface ShutdownHost {
  readonly console: BoardConsole;
  /** Stops the main loop: queued work is lost. */
  stopLoop(): void;
  /** Drops the channel, if one is open, without a close frame. */
  dropChannel(reason: string): void;
  /** The current boot's reset signal: a reset from outside cancels the pending restart. */
  readonly signal: BootSignal;
  restart(reason: ResetReason): void;
}

/** Restarts with `RTC_SW_CPU_RST` after `ms`, unless the boot's signal is aborted first. */
export function restartAfter(host: ShutdownHost, ms: number): void {
  host.signal.sleep(ms).then(
    () => host.restart('RTC_SW_CPU_RST'),
    () => {},
  );
}

/** The panic handler: the dump, then a reset after `pauseMs`. */
export function crash(
  host: ShutdownHost,
  panic: BoardPanic,
  elfSha256: string,
  pauseMs: number,
): void {
  host.stopLoop();
  host.dropChannel('panic');
  for (const line of panicLines(panic, elfSha256)) host.console.raw(line);
  restartAfter(host, pauseMs);
}

/** `Application::Reboot`: closes the channel, drops queued work, restarts after `pauseMs`. */
export function softReboot(host: ShutdownHost, pauseMs: number): void {
  host.stopLoop();
  host.console.log('I', 'Application', 'Rebooting...');
  host.dropChannel('reboot');
  restartAfter(host, pauseMs);
}
