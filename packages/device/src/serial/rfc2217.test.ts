/**
 * A virtual board on another host, end to end: the board's port (the virtual serial binding,
 * on a CP2102 or on the chip's USB-Serial-JTAG) shared by our RFC 2217 server on 127.0.0.1,
 * reached through `rfc2217://` by our RFC 2217 client, and flashed by the real esptool-js
 * through `flasherFor` and `NodeWebSerialPort`, as `xiaozhi-mcp flash --port rfc2217://...`
 * and hil's remote boards do. No check here shares code with what it checks: the RFC 2217
 * bytes are checked by what arrives, the flash by its MD5 and by the board booting it.
 */
import { createHash } from 'node:crypto';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import {
  flasherFor,
  NodeWebSerialPort,
  probeRfc2217,
  type ResolvedPort,
  Rfc2217Server,
  resolvePort,
  type SerialBinding,
} from '@xiaozhi-mcp/serial';
import { until } from '@xiaozhi-mcp/test-kit';
import { afterEach, describe, expect, it } from 'vitest';
import { FAST_TIMING } from '../testing/timing.js';
import type { BoardTiming } from '../virtual-board.js';
import type { VirtualBindingPort } from './virtual-binding.js';
import { VirtualBus, type VirtualBusBoard } from './virtual-bus.js';

const MB = 1024 * 1024;
const TIMING: Partial<BoardTiming> = { ...FAST_TIMING, panicRebootMs: 200 };
const cleanups: (() => Promise<void> | void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

const md5 = (data: Uint8Array) => createHash('md5').update(data).digest('hex');

/** Where `needle` starts in `haystack`, or -1. */
function indexOf(haystack: readonly number[], needle: Uint8Array): number {
  outer: for (let i = 0; i + needle.length <= haystack.length; i++) {
    for (let j = 0; j < needle.length; j++) if (haystack[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

const firmware = (version: string) =>
  buildVirtualFirmware({
    chip: 'esp32s3',
    version,
    board: 'bread-compact-wifi',
    flashSizeMb: 4,
    padToFlashSize: true,
  });

/**
 * A powered board with a 4 MB flash plugged into a virtual bus, its port shared by an RFC 2217
 * server on 127.0.0.1 (a port the OS picks), and the port as a client resolves
 * `rfc2217://127.0.0.1:<port>`. `installed`: the version its flash holds (else erased).
 * `opened`: the local port the server opened, each time it did.
 */
async function sharedBoard(usb: VirtualBusBoard['usb'] = 'uart', installed?: string) {
  const bus = new VirtualBus(TIMING);
  const local = bus.plug({ preset: 'bread-compact-wifi', flashSizeMb: 4, usb }, 'virtual:remote');
  const flash = local.board.flash;
  if (flash === undefined) throw new Error('the virtual board has no flash');
  if (installed !== undefined) {
    // Before its first boot, and powered on again: a power-on does not re-enumerate a native
    // USB board, the boot loop of an erased flash (a watchdog reset each time) would.
    local.board.powerOff();
    flash.program(0, firmware(installed).merged);
    local.board.powerOn();
  }
  const opened: VirtualBindingPort[] = [];
  const binding: SerialBinding = {
    list: () => bus.binding.list(),
    open: async (options) => {
      const port = await bus.binding.open(options);
      opened.push(port);
      return port;
    },
  };
  const serverLog: string[] = [];
  const server = await Rfc2217Server.start({
    port: { ...local, binding } satisfies ResolvedPort,
    host: '127.0.0.1',
    listenPort: 0,
    log: (line) => serverLog.push(line),
  });
  cleanups.push(async () => {
    await server.close();
    bus.close();
  });
  const remote = await resolvePort(server.url);
  return {
    bus,
    local,
    board: local.board,
    device: local.device,
    flash,
    server,
    serverLog,
    remote,
    opened,
  };
}

describe('esptool-js through our RFC 2217 client and server', () => {
  it('flashes a 4 MB merged image at 921600 baud with one reset, verifies it, and the board boots it', {
    timeout: 120_000,
  }, async () => {
    const { board, device, flash, server, serverLog, remote } = await sharedBoard();
    // The client writes RTS, then DTR, one SET-CONTROL each (resolve.ts `linePlatform`).
    expect(remote).toMatchObject({ path: server.url, linePlatform: 'win32' });
    expect(remote.info.kind).toBe('usb-uart');
    const flasher = flasherFor(remote, {
      ...(remote.linePlatform === undefined ? {} : { platform: remote.linePlatform }),
    });
    cleanups.push(() => flasher.disconnect());
    const fw = firmware('2.6.1');
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.1$/, 60_000);

    // The hard reset comes after the check of the flash: the app writes its NVS as it boots.
    const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
      baudRate: 921_600,
      reset: false,
    });

    expect(result.chip).toMatchObject({
      chip: 'esp32s3',
      chipId: 9,
      mac: board.mac,
      flashSizeMb: 4,
      usbJtagSerial: false,
    });
    expect(result.chip.description).toMatch(/^ESP32-S3 /);
    expect(result).toMatchObject({ flaky: false, failures: [], baudRate: 921_600, bytes: 4 * MB });
    // Verified by the stub's MD5 (esptool's), and by the board's flash itself.
    expect(flasher.log).toContain(`Hash of data verified. (${md5(fw.merged)})`);
    expect(flash.md5(0, 4 * MB)).toBe(md5(fw.merged));
    await flasher.disconnect({ reset: true });
    await booted;
    expect(board.version).toBe('2.6.1');
    expect(
      board.console.history.some((l) => l.text.includes('app_init: App version:      2.6.1')),
    ).toBe(true);

    // The first connect attempt synced: one reset into download mode, asked for once by the
    // client (esptool-js's first, ClassicReset at 50 ms) and played once by the server.
    expect(flasher.log.filter((l) => l.startsWith('Resetting'))).toEqual([
      'Resetting into download mode (classic 50 ms)...',
    ]);
    expect(flasher.log.some((l) => /Autodetection failed/.test(l))).toBe(false);
    expect(device.lineEvents.filter((e) => e.kind === 'reset' && e.download)).toHaveLength(1);
    // ... and the hard reset after the write booted the app.
    expect(device.lineEvents.at(-1)).toEqual({ kind: 'reset', download: false });
    await until(() => serverLog.some((l) => /hard reset/.test(l)), {
      what: 'the hard reset in the log',
      timeoutMs: 30_000,
    });
    const played = serverLog.filter((l) => /reset into download mode recognised/.test(l));
    expect(played).toHaveLength(1);
    expect(played[0]).toMatch(
      /^client 127\.0\.0\.1:\d+: reset into download mode recognised \(ClassicReset order\); played (tight|classic) 50 ms locally$/,
    );
    expect(serverLog).toContainEqual(
      expect.stringMatching(
        /^client 127\.0\.0\.1:\d+: hard reset \(an RTS pulse\) passed through$/,
      ),
    );
  });

  it('flashes a board on its USB-Serial-JTAG, whose port re-enumerates on reset: the server finds it again', {
    timeout: 120_000,
  }, async () => {
    const { board, device, flash, serverLog, server, remote } = await sharedBoard(
      'native',
      '2.6.0',
    );
    const firstPath = device.path;
    expect(firstPath).toMatch(/^\/dev\/ttyACM\d+$/);
    // The server knows what it shares and says so in its signature; the client reads the kind
    // from it, having no USB ids over the network (on the connection the flasher's open takes
    // over: the server has one client at a time).
    expect(remote.info.kind).toBe('usb-serial-jtag');
    const flasher = flasherFor(remote, {
      ...(remote.linePlatform === undefined ? {} : { platform: remote.linePlatform }),
    });
    cleanups.push(() => flasher.disconnect());
    // esptool's choice for a USB-Serial-JTAG (`loader.py`: USBJTAGSerialReset by its PID).
    expect(flasher.resetPlan).toEqual([{ sequence: 'usbJtag' }]);
    const fw = firmware('2.6.2');
    const booted = board.waitForLine(/app_init: App version:\s+2\.6\.2$/, 60_000);

    // The hard reset comes after the check of the flash: the app writes its NVS as it boots.
    const result = await flasher.flash([{ offset: 0, data: fw.merged }], {
      baudRate: 921_600,
      reset: false,
    });

    expect(result.chip).toMatchObject({ chip: 'esp32s3', mac: board.mac, usbJtagSerial: true });
    expect(result).toMatchObject({ flaky: false, failures: [] });
    expect(flash.md5(0, 4 * MB)).toBe(md5(fw.merged));
    await flasher.disconnect({ reset: true });
    const probe = await probeRfc2217(server.url);
    expect(probe.signature).toBe('xiaozhi-mcp port serve port=virtual:remote kind=usb-serial-jtag');
    await booted;
    expect(board.version).toBe('2.6.2');
    expect(flasher.log.filter((l) => l.startsWith('Resetting'))).toEqual([
      'Resetting into download mode (USB-JTAG)...',
    ]);
    expect(serverLog).toContainEqual(
      expect.stringMatching(
        /reset into download mode recognised \(USBJTAGSerialReset order\); played usbJtag locally$/,
      ),
    );
    // The app starting after the hard reset re-enumerated the port under a new path; the server
    // found it again by its serial number and reopened it.
    await until(() => serverLog.some((l) => /^virtual:remote: back on /.test(l)), {
      what: 'the port back',
      timeoutMs: 30_000,
    });
    expect(serverLog).toContainEqual(
      expect.stringMatching(/^virtual:remote: .*disconnected; waiting up to 10 s/),
    );
    expect(device.path).not.toBe(firstPath);
    expect(serverLog).toContainEqual(`virtual:remote: back on ${device.path}`);

    // The same URL still reaches the board: a second session connects on the new port.
    const again = flasherFor(remote, {
      ...(remote.linePlatform === undefined ? {} : { platform: remote.linePlatform }),
    });
    cleanups.push(() => again.disconnect());
    expect(await again.connect()).toMatchObject({ chip: 'esp32s3', mac: board.mac });
  });
});

describe("Python esptool's reset through our server to a USB-Serial-JTAG board", () => {
  it('ClassicReset (what esptool sends to every rfc2217:// port) still enters download mode', {
    timeout: 120_000,
  }, async () => {
    // esptool cannot know what is behind rfc2217:// and sends ClassicReset (`loader.py`); its
    // R1 alone would reset a USB-Serial-JTAG chip without the download strap. The server holds
    // it until D1 says a download reset, and plays the port's own USB-JTAG reset.
    const { board, serverLog, remote } = await sharedBoard('native', '2.6.0');
    const flasher = flasherFor(remote, {
      reset: 'classic',
      ...(remote.linePlatform === undefined ? {} : { platform: remote.linePlatform }),
    });
    cleanups.push(() => flasher.disconnect());
    expect(await flasher.connect()).toMatchObject({ chip: 'esp32s3', mac: board.mac });
    expect(flasher.log.filter((l) => l.startsWith('Resetting'))).toHaveLength(1);
    expect(serverLog).toContainEqual(
      expect.stringMatching(
        /reset into download mode recognised \(ClassicReset order\); played usbJtag locally$/,
      ),
    );
  });
});

describe('a console through our RFC 2217 client and server', () => {
  it('reads the boot log after a reset through the lines, in order, and bytes of every value both ways', {
    timeout: 120_000,
  }, async () => {
    const { board, device, remote, opened } = await sharedBoard('uart', '2.6.3');
    // The board's first boot, over before the port is opened.
    const settled = /StateMachine: State: \S+ -> wifi_configuring$/;
    await until(() => board.console.history.some((l) => settled.test(l.text)), {
      what: 'the first boot',
      timeoutMs: 30_000,
    });
    const port = NodeWebSerialPort.fromPortInfo(remote.binding, {
      ...remote.info,
      path: remote.path,
    });
    await port.open({ baudRate: 115_200 });
    cleanups.push(() => port.close());
    const received: number[] = [];
    const reader = port.readable?.getReader();
    if (reader === undefined) throw new Error('the port has no readable');
    void (async () => {
      for (;;) {
        const { value, done } = await reader.read().catch(() => ({ value: undefined, done: true }));
        if (done) return;
        if (value !== undefined) received.push(...value);
      }
    })();
    // From the ROM's banner on: a reset drops what the UART still held of the line before.
    const sinceReset = () => {
      const all = Buffer.from(received).toString('latin1');
      const at = all.indexOf('ESP-ROM:');
      return at < 0 ? '' : all.slice(at);
    };

    // esptool's HardReset (`reset.py`: R1, 100 ms, R0), as `monitor --reset` does it.
    const historyBefore = board.console.history.length;
    await port.setSignals({ dataTerminalReady: false, requestToSend: true });
    // esptool's own 100 ms in reset, played as it plays it (longer on a busy machine is fine).
    await new Promise((resolve) => setTimeout(resolve, 100));
    await port.setSignals({ dataTerminalReady: false, requestToSend: false });
    await until(
      () => /App version:\s+2\.6\.3\r\n[\s\S]*-> wifi_configuring\r\n/.test(sinceReset()),
      { what: 'the boot log through the pair', timeoutMs: 30_000 },
    );
    // The lines the board printed since the reset arrive as it printed them: a subsequence of
    // its console (lines the throttled UART could not keep up with are dropped on the board).
    const lines = sinceReset().split('\r\n').slice(0, -1); // the last one may be partial
    const printed = board.console.history.slice(historyBefore).map((l) => l.text);
    let at = 0;
    for (const line of lines) {
      const next = printed.indexOf(line, at);
      expect(next, `"${line}" in order`).toBeGreaterThanOrEqual(at);
      at = next + 1;
    }
    expect(lines[0]).toMatch(/^ESP-ROM:esp32s3-/);
    expect(lines).toContain('rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)');
    expect(lines.some((l) => l.includes('app_init: App version:      2.6.3'))).toBe(true);

    // Every byte value, and Telnet's own sequences (IAC IAC, IAC SB, IAC SE), board to host:
    // 0xFF is doubled on the wire (RFC 854) and must arrive single.
    const pattern = Uint8Array.from({ length: 4096 }, (_, i) => (i < 256 ? i : (i * 131) % 256));
    pattern.set([0xff, 0xff, 0xff, 0xfa, 0x2c, 0xff, 0xf0, 0xff], 256);
    const local = opened.at(-1);
    if (local === undefined) throw new Error('the server did not open the local port');
    received.length = 0;
    local.receive(pattern, 115_200);
    // The app may still print: its lines come before or after the pattern, never inside it.
    await until(() => indexOf(received, pattern) >= 0, {
      what: 'the pattern at the host',
      timeoutMs: 30_000,
    });

    // ... and host to board, as the board's UART receives them.
    const atBoard: number[] = [];
    const hostSend = device.hostSend.bind(device);
    device.hostSend = (bytes, baud) => {
      atBoard.push(...bytes);
      return hostSend(bytes, baud);
    };
    const writer = port.writable?.getWriter();
    if (writer === undefined) throw new Error('the port has no writable');
    await writer.write(pattern);
    writer.releaseLock();
    await until(() => atBoard.length >= pattern.length, {
      what: 'the pattern at the board',
      timeoutMs: 30_000,
    });
    expect(Uint8Array.from(atBoard)).toEqual(pattern);
    await reader.cancel();
    reader.releaseLock();
  });
});
