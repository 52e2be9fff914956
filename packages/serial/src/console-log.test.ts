import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import type { ConsoleRecord, PanicReport } from './console-log.js';
import {
  BootLoopDetector,
  ConsoleLineSplitter,
  knownLine,
  PanicDetector,
  parseConsoleLine,
  stripAnsi,
} from './console-log.js';

const ESP32S3_BOOT = [
  'ESP-ROM:esp32s3-20210327',
  'Build:Mar 27 2021',
  'rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)',
  'SPIWP:0xee',
  'mode:DIO, clock div:1',
  'load:0x3fce2810,len:0x178c',
  'load:0x403c8700,len:0x4',
  'load:0x403c8704,len:0xcb8',
  'load:0x403cb700,len:0x2db0',
  'entry 0x403c8924',
  'I (27) boot: ESP-IDF v5.5.2 2nd stage bootloader',
];

const ESP32_BOOT = [
  'ets Jun  8 2016 00:22:57',
  '',
  'rst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)',
  'configsip: 0, SPIWP:0xee',
  'clk_drv:0x00,q_drv:0x00,d_drv:0x00,cs0_drv:0x00,hd_drv:0x00,wp_drv:0x00',
  'mode:DIO, clock div:2',
  'load:0x3fff0030,len:7104',
  'ho 0 tail 12 room 4',
  'load:0x40080404,len:3876',
  'entry 0x4008064c',
];

/** As VirtualBoard#panic prints it (LoadProhibited). */
const GURU_DUMP = [
  "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
  '',
  'Core  1 register dump:',
  'PC      : 0x42012c4e  PS      : 0x00060a30  A0      : 0x82013a6d  A1      : 0x3fcb7d10',
  'EXCVADDR: 0x00000000  (null pointer)',
  '',
  'Backtrace: 0x4037a1f3:0x3fcb7b90 0x4037f2a1:0x3fcb7bb0 0x42012c4b:0x3fcb7d10',
  '',
  'ELF file SHA256: c1b2f3e4a5d69788',
  '',
  'Rebooting...',
];

const fields = (line: string): Partial<ConsoleRecord> => parseConsoleLine(line);

describe('stripAnsi', () => {
  it('removes IDF colour codes and other CSI sequences', () => {
    expect(stripAnsi('\x1b[0;32mI (1234) WS: Session ID: abc\x1b[0m')).toBe(
      'I (1234) WS: Session ID: abc',
    );
    expect(stripAnsi('\x1b[2K\x1b[1Aplain')).toBe('plain');
    expect(stripAnsi('no codes')).toBe('no codes');
  });
});

describe('parseConsoleLine: log lines', () => {
  it('reads level, milliseconds, tag and text', () => {
    expect(parseConsoleLine('I (1234) Application: Network connected')).toEqual({
      kind: 'log',
      level: 'I',
      ms: 1234,
      tag: 'Application',
      text: 'Network connected',
      line: 'I (1234) Application: Network connected',
    });
  });

  it('reads coloured lines as if they were plain', () => {
    const record = parseConsoleLine('\x1b[0;31mE (88) WS: Failed to receive server hello\x1b[0m');
    expect(record).toMatchObject({ kind: 'log', level: 'E', ms: 88, tag: 'WS' });
    expect(record.line).toBe('E (88) WS: Failed to receive server hello');
  });

  it('reads wifi-style lines with no space after the colon', () => {
    expect(fields('I (612) wifi:mode : sta (f4:12:fa:00:11:22)')).toMatchObject({
      kind: 'log',
      tag: 'wifi',
      text: 'mode : sta (f4:12:fa:00:11:22)',
    });
    expect(fields('W (3120) wifi:<ba-add>idx:0 (ifx:0, 11:22:33:44:55:66), tid:0')).toMatchObject({
      level: 'W',
      tag: 'wifi',
      text: '<ba-add>idx:0 (ifx:0, 11:22:33:44:55:66), tid:0',
    });
  });

  it('takes the tag up to the first colon, spaces included', () => {
    expect(fields('I (45) esp_image: segment 0: paddr=00010020 vaddr=3c0b0020')).toMatchObject({
      tag: 'esp_image',
      text: 'segment 0: paddr=00010020 vaddr=3c0b0020',
    });
    expect(fields('D (9) My Tag: hello')).toMatchObject({
      level: 'D',
      tag: 'My Tag',
      text: 'hello',
    });
    expect(fields('V (0) x: ')).toMatchObject({ level: 'V', ms: 0, tag: 'x', text: '' });
  });

  it('reads system-time timestamps as milliseconds', () => {
    expect(fields('I (01:02:03.456) Ota: Current version: 2.4.2')).toMatchObject({
      ms: ((1 * 60 + 2) * 60 + 3) * 1000 + 456,
      tag: 'Ota',
    });
  });

  it('leaves other lines as text, trailing whitespace trimmed', () => {
    expect(parseConsoleLine('hello world  ')).toEqual({ kind: 'text', line: 'hello world' });
    expect(parseConsoleLine('')).toEqual({ kind: 'text', line: '' });
    expect(parseConsoleLine('X (12) TAG: not a level').kind).toBe('text');
    expect(parseConsoleLine('I (abc) TAG: not a time').kind).toBe('text');
  });
});

describe('parseConsoleLine: ROM bootloader', () => {
  it('reads the esp32s3 banner as the virtual board prints it', () => {
    const records = ESP32S3_BOOT.map(parseConsoleLine);
    expect(records.map((r) => (r.kind === 'rom' ? r.field : r.kind))).toEqual([
      'banner',
      'banner',
      'rst',
      'other',
      'other',
      'load',
      'load',
      'load',
      'load',
      'entry',
      'log',
    ]);
    expect(records[2]).toMatchObject({ resetCode: 1, resetReason: 'POWERON' });
  });

  it('reads the esp32 banner', () => {
    const records = ESP32_BOOT.map(parseConsoleLine);
    expect(records.map((r) => (r.kind === 'rom' ? r.field : r.kind))).toEqual([
      'banner',
      'text',
      'rst',
      'other',
      'other',
      'other',
      'load',
      'other',
      'load',
      'entry',
    ]);
    expect(records[2]).toMatchObject({ resetCode: 1, resetReason: 'POWERON_RESET' });
  });

  it('reads reset codes in hex, and the software and watchdog resets', () => {
    expect(fields('rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)')).toMatchObject({
      field: 'rst',
      resetCode: 12,
      resetReason: 'RTC_SW_CPU_RST',
    });
    expect(fields('rst:0x10 (RTCWDT_RTC_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)')).toMatchObject({
      resetCode: 16,
      resetReason: 'RTCWDT_RTC_RESET',
    });
  });

  it('reads download mode', () => {
    expect(fields('rst:0x1 (POWERON),boot:0x0 (DOWNLOAD(USB/UART0/1))')).toMatchObject({
      field: 'rst',
      resetReason: 'POWERON',
    });
    expect(fields('boot:0x0 (DOWNLOAD(USB/UART0/1))')).toMatchObject({ field: 'boot' });
    expect(fields('waiting for download')).toMatchObject({ kind: 'rom', field: 'boot' });
  });

  it('finds the banner behind the bytes of a line cut by the reset', () => {
    expect(
      fields('I (5321) Application: Activat\uFFFD\uFFFDets Jun  8 2016 00:22:57'),
    ).toMatchObject({
      kind: 'rom',
      field: 'banner',
    });
    expect(fields('\uFFFD\u0000ESP-ROM:esp32c3-api1-20210207')).toMatchObject({ field: 'banner' });
    expect(
      fields('\u0000\uFFFDrst:0x15 (USB_UART_HPSYS),boot:0x8 (SPI_FAST_FLASH_BOOT)'),
    ).toMatchObject({
      field: 'rst',
      resetCode: 0x15,
    });
  });

  it('does not take log text for ROM lines', () => {
    expect(parseConsoleLine('I (100) Ota: entry 0x403c8924').kind).toBe('log');
    expect(parseConsoleLine('the load:0x1,len:2 text').kind).toBe('text');
  });
});

describe('parseConsoleLine: panics and backtraces', () => {
  const cases: [string, string, string][] = [
    [
      "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
      'guru',
      "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
    ],
    [
      "Guru Meditation Error: Core  0 panic'ed (Interrupt wdt timeout on CPU0). ",
      'guru',
      "Guru Meditation Error: Core  0 panic'ed (Interrupt wdt timeout on CPU0).",
    ],
    [
      'abort() was called at PC 0x4037a1f6 on core 1',
      'abort',
      'abort() was called at PC 0x4037a1f6 on core 1',
    ],
    [
      'assert failed: xQueueGenericSend queue.c:832 (pxQueue)',
      'assert',
      'assert failed: xQueueGenericSend queue.c:832 (pxQueue)',
    ],
    [
      '***ERROR*** A stack overflow in task audio_input has been detected.',
      'stack-overflow',
      '***ERROR*** A stack overflow in task audio_input has been detected.',
    ],
    ['Brownout detector was triggered', 'brownout', 'Brownout detector was triggered'],
    [
      'E (65432) task_wdt: Task watchdog got triggered. The following tasks/users did not reset the watchdog in time:',
      'task-wdt',
      'task_wdt: Task watchdog got triggered. The following tasks/users did not reset the watchdog in time:',
    ],
    [
      'CORRUPT HEAP: Bad head at 0x3fca1234. Expected 0xabba1234 got 0x00000000',
      'heap-corruption',
      'CORRUPT HEAP: Bad head at 0x3fca1234. Expected 0xabba1234 got 0x00000000',
    ],
    [
      "terminate called after throwing an instance of 'std::bad_alloc'",
      'cxx-exception',
      "terminate called after throwing an instance of 'std::bad_alloc'",
    ],
  ];

  it.each(cases)('%s', (line, panic, reason) => {
    expect(parseConsoleLine(line)).toEqual({ kind: 'panic', panic, reason, line: line.trimEnd() });
  });

  it('finds a panic in the middle of a cut log line', () => {
    expect(
      fields("I (8) Applic\uFFFDGuru Meditation Error: Core  0 panic'ed (StoreProhibited)"),
    ).toMatchObject({
      kind: 'panic',
      panic: 'guru',
      reason: "Guru Meditation Error: Core  0 panic'ed (StoreProhibited)",
    });
  });

  it('reads backtraces: PCs of the PC:SP pairs', () => {
    expect(
      parseConsoleLine(
        'Backtrace: 0x4037a1f3:0x3fcb7b90 0x4037f2a1:0x3fcb7bb0 0x42012c4b:0x3fcb7d10',
      ),
    ).toMatchObject({
      kind: 'backtrace',
      addresses: ['0x4037a1f3', '0x4037f2a1', '0x42012c4b'],
      corrupted: false,
    });
    expect(
      parseConsoleLine('Backtrace: 0x40081f2e:0x3ffb0b50 0x400d1a2c:0x3ffb0b70 |<-CORRUPTED'),
    ).toMatchObject({ addresses: ['0x40081f2e', '0x400d1a2c'], corrupted: true });
  });
});

describe('knownLine: the lines of docs/protocol.md §9', () => {
  const known = (line: string) => knownLine(parseConsoleLine(line));
  const cases: [string, unknown][] = [
    [
      'I (820) Board: UUID=0b3c6a1e-5f2d-4c8e-9a7b-1d2e3f4a5b6c SKU=bread-compact-wifi',
      { kind: 'board', uuid: '0b3c6a1e-5f2d-4c8e-9a7b-1d2e3f4a5b6c', sku: 'bread-compact-wifi' },
    ],
    ['I (301) cpu_start: Project name:     xiaozhi', { kind: 'projectName', name: 'xiaozhi' }],
    ['I (305) app_init: App version:      2.4.2', { kind: 'appVersion', version: '2.4.2' }],
    ['I (305) cpu_start: App version:      1.6.0', { kind: 'appVersion', version: '1.6.0' }],
    [
      'I (900) MCP: Add tool: self.get_device_status',
      { kind: 'mcpTool', name: 'self.get_device_status', userOnly: false },
    ],
    [
      'I (901) MCP: Add tool: self.reboot [user]',
      { kind: 'mcpTool', name: 'self.reboot', userOnly: true },
    ],
    ['E (9000) MCP: Invalid id 7', { kind: 'mcpError', message: 'Invalid id 7' }],
    [
      'E (9001) MCP: Method not implemented: foo/bar',
      { kind: 'mcpError', message: 'Method not implemented: foo/bar' },
    ],
    ['I (2100) WifiStation: Got IP: 192.168.1.42', { kind: 'gotIp', ip: '192.168.1.42' }],
    [
      'I (2101) WifiBoard: Connected to WiFi: my home net',
      { kind: 'wifiConnected', ssid: 'my home net' },
    ],
    ['I (2102) Application: Network connected', { kind: 'networkConnected' }],
    ['I (1000) WifiBoard: WiFi config mode entered', { kind: 'wifiConfigMode' }],
    [
      'I (2200) StateMachine: State: activating -> idle',
      { kind: 'stateChange', from: 'activating', to: 'idle' },
    ],
    [
      'I (2200) StateMachine: State: wifi_configuring -> fatal_error',
      { kind: 'stateChange', from: 'wifi_configuring', to: 'fatal_error' },
    ],
    ['I (2150) Ota: Current version: 2.4.2', { kind: 'otaCurrentVersion', version: '2.4.2' }],
    [
      'I (2150) Ota: Current version: 2.4.2, New version: 2.5.0',
      { kind: 'otaUpgraded', from: '2.4.2', to: '2.5.0' },
    ],
    ['I (2160) Ota: New version available: 2.5.0', { kind: 'otaNewVersion', version: '2.5.0' }],
    ['I (2160) Ota: Current is the latest version', { kind: 'otaLatest' }],
    [
      'W (2170) Application: Check new version failed, retry in 10 seconds (1/10)',
      { kind: 'otaCheckFailed', retryInSeconds: 10, attempt: 1, maxAttempts: 10 },
    ],
    [
      'I (5000) Ota: Progress: 30% (30000/100000)',
      { kind: 'otaProgress', percent: 30, received: 30000, total: 100000 },
    ],
    [
      'I (3000) WS: Connecting to websocket server: wss://api.example.com/xiaozhi/v1/ with version: 3',
      { kind: 'wsConnecting', url: 'wss://api.example.com/xiaozhi/v1/', version: 3 },
    ],
    ['I (3100) WS: Session ID: 9f8e7d6c', { kind: 'sessionId', sessionId: '9f8e7d6c' }],
    ['E (3100) WS: Failed to receive server hello', { kind: 'wsHelloFailed' }],
    ['I (9999) WS: Websocket disconnected', { kind: 'wsDisconnected' }],
    ['I (3000) MQTT: Connected to endpoint', { kind: 'mqttConnected' }],
    [
      'W (3000) MQTT: MQTT disconnected, schedule reconnect in 60 seconds',
      { kind: 'mqttDisconnected', reconnectInSeconds: 60 },
    ],
    ['I (100) Application: Rebooting...', { kind: 'rebooting' }],
    ['\x1b[0;32mI (3100) WS: Session ID: s-1\x1b[0m', { kind: 'sessionId', sessionId: 's-1' }],
  ];

  it.each(cases)('%s', (line, expected) => {
    expect(known(line)).toEqual(expected);
  });

  it('knows nothing of other lines, other tags or non-log records', () => {
    expect(known('I (1) Other: Network connected')).toBeUndefined();
    expect(known('I (1) Application: Something else')).toBeUndefined();
    expect(known('Network connected')).toBeUndefined();
    expect(known('rst:0x1 (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)')).toBeUndefined();
  });
});

describe('ConsoleLineSplitter', () => {
  it('ends lines at \\n, \\r\\n and a bare \\r', () => {
    const splitter = new ConsoleLineSplitter();
    expect(splitter.feed('a\nb\r\nc\rd')).toEqual(['a', 'b', 'c']);
    expect(splitter.partial).toBe('d');
    expect(splitter.flush()).toEqual(['d']);
    expect(splitter.flush()).toEqual([]);
  });

  it('keeps empty lines', () => {
    expect(new ConsoleLineSplitter().feed('a\n\nb\r\n\r\n')).toEqual(['a', '', 'b', '']);
  });

  it('treats \\r and \\n in different chunks as one line ending', () => {
    const splitter = new ConsoleLineSplitter();
    expect(splitter.feed('one\r')).toEqual(['one']);
    expect(splitter.feed('\ntwo\r')).toEqual(['two']);
    expect(splitter.feed('\r')).toEqual(['']);
    expect(splitter.feed('\n')).toEqual([]);
  });

  it('joins partial lines across chunks', () => {
    const splitter = new ConsoleLineSplitter();
    expect(splitter.feed('I (12) App')).toEqual([]);
    expect(splitter.feed('lication: Net')).toEqual([]);
    expect(splitter.feed('work connected\nnext')).toEqual([
      'I (12) Application: Network connected',
    ]);
    expect(splitter.flush()).toEqual(['next']);
  });

  it('decodes UTF-8 split across chunks', () => {
    const bytes = new TextEncoder().encode('你好 😀\n');
    const splitter = new ConsoleLineSplitter();
    const lines = [...bytes].flatMap((byte) => splitter.feed(Uint8Array.of(byte)));
    expect(lines).toEqual(['你好 😀']);
  });

  it('replaces invalid UTF-8 with U+FFFD', () => {
    const splitter = new ConsoleLineSplitter();
    expect(splitter.feed(Uint8Array.of(0x61, 0xff, 0xfe, 0x62, 0x0a))).toEqual(['a\uFFFD\uFFFDb']);
    // a cut sequence at the end of the stream
    expect(splitter.feed(Uint8Array.of(0x63, 0xe4, 0xbd))).toEqual([]);
    expect(splitter.flush()).toEqual(['c\uFFFD']);
  });

  it('does not wait for the rest of a character when a string follows bytes', () => {
    const splitter = new ConsoleLineSplitter();
    splitter.feed(Uint8Array.of(0x61, 0xe4));
    expect(splitter.feed('b\n')).toEqual(['a\uFFFDb']);
  });

  it('cuts lines longer than maxLineLength', () => {
    const splitter = new ConsoleLineSplitter({ maxLineLength: 4 });
    expect(splitter.feed('abcdefghij')).toEqual(['abcd', 'efgh']);
    expect(splitter.feed('\n')).toEqual(['ij']);
    expect(splitter.feed('abcd\n')).toEqual(['abcd']);
    expect(() => new ConsoleLineSplitter({ maxLineLength: 1 })).toThrow(RangeError);
  });

  const textArb = fc
    .array(fc.constantFrom('a', 'b', ' ', '\r', '\n', 'é', '好', '😀', '\x1b'), { maxLength: 60 })
    .map((parts) => parts.join(''));

  /** Splits `length` into pieces at arbitrary (sorted, possibly repeated) points. */
  const cutsArb = fc.array(fc.nat(), { maxLength: 12 });
  function cut<T extends { length: number; slice(a: number, b?: number): T }>(
    whole: T,
    points: number[],
  ): T[] {
    const sorted = points
      .map((p) => (whole.length === 0 ? 0 : p % (whole.length + 1)))
      .sort((a, b) => a - b);
    const pieces: T[] = [];
    let from = 0;
    for (const point of sorted) {
      pieces.push(whole.slice(from, point));
      from = point;
    }
    pieces.push(whole.slice(from));
    return pieces;
  }

  function reference(text: string): string[] {
    const parts = text.split(/\r\n|\r|\n/);
    if (parts.at(-1) === '') parts.pop();
    return parts;
  }

  function run(splitter: ConsoleLineSplitter, chunks: (string | Uint8Array)[]): string[] {
    return [...chunks.flatMap((chunk) => splitter.feed(chunk)), ...splitter.flush()];
  }

  it('gives the same lines however a text is cut into string chunks (property)', () => {
    fc.assert(
      fc.property(textArb, cutsArb, (text, points) => {
        expect(run(new ConsoleLineSplitter(), cut(text, points))).toEqual(reference(text));
      }),
    );
  });

  it('gives the same lines however the UTF-8 bytes are cut (property)', () => {
    fc.assert(
      fc.property(textArb, cutsArb, (text, points) => {
        const bytes = new TextEncoder().encode(text);
        expect(run(new ConsoleLineSplitter(), cut(bytes, points))).toEqual(reference(text));
      }),
    );
  });

  it('cuts long lines at the same places however the text is chunked (property)', () => {
    fc.assert(
      fc.property(textArb, cutsArb, fc.integer({ min: 2, max: 7 }), (text, points, max) => {
        const whole = run(new ConsoleLineSplitter({ maxLineLength: max }), [text]);
        const chunked = run(new ConsoleLineSplitter({ maxLineLength: max }), cut(text, points));
        expect(chunked).toEqual(whole);
        expect(whole.join('')).toBe(reference(text).join(''));
        for (const line of whole) expect(line.length).toBeLessThanOrEqual(max);
      }),
    );
  });
});

describe('BootLoopDetector', () => {
  function clock() {
    let t = 0;
    return {
      now: () => t,
      advance: (ms: number) => {
        t += ms;
      },
    };
  }
  const rst = (reason = 'RTC_SW_CPU_RST') =>
    parseConsoleLine(`rst:0xc (${reason}),boot:0x8 (SPI_FAST_FLASH_BOOT)`);

  it('reports 3 resets within 30 s', () => {
    const c = clock();
    const detector = new BootLoopDetector({ now: c.now });
    expect(detector.feed(rst('POWERON'))).toBeUndefined();
    c.advance(5000);
    expect(
      detector.feed(parseConsoleLine('I (100) cpu_start: Project name:     xiaozhi')),
    ).toBeUndefined();
    expect(detector.feed(rst())).toBeUndefined();
    c.advance(5000);
    expect(detector.feed(rst())).toEqual({
      resets: 3,
      spanMs: 10_000,
      windowMs: 30_000,
      reasons: ['POWERON', 'RTC_SW_CPU_RST', 'RTC_SW_CPU_RST'],
      lines: [
        'rst:0xc (POWERON),boot:0x8 (SPI_FAST_FLASH_BOOT)',
        'rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)',
        'rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)',
      ],
    });
    // reported once; counting starts afresh
    expect(detector.feed(rst())).toBeUndefined();
  });

  it('does not report resets when the app reaches idle or the network in between', () => {
    for (const healthy of [
      'I (2200) StateMachine: State: activating -> idle',
      '\x1b[0;32mI (2102) Application: Network connected\x1b[0m',
    ]) {
      const detector = new BootLoopDetector({ now: () => 0 });
      for (let i = 0; i < 5; i++) {
        expect(detector.feed(rst())).toBeUndefined();
        expect(detector.feed(rst())).toBeUndefined();
        detector.feed(parseConsoleLine(healthy));
      }
    }
  });

  it('does not report resets spread wider than the window', () => {
    const c = clock();
    const detector = new BootLoopDetector({ now: c.now });
    for (let i = 0; i < 6; i++) {
      expect(detector.feed(rst())).toBeUndefined();
      c.advance(15_001);
    }
  });

  it('takes its count, window and healthy lines from options', () => {
    const c = clock();
    const detector = new BootLoopDetector({
      resets: 2,
      windowMs: 1000,
      healthy: [/READY/],
      now: c.now,
    });
    detector.feed(rst());
    detector.feed(parseConsoleLine('I (5) Application: Network connected'));
    c.advance(999);
    expect(detector.feed(rst())?.resets).toBe(2);
    detector.feed(rst());
    detector.feed(parseConsoleLine('READY'));
    expect(detector.feed(rst())).toBeUndefined();
    detector.reset();
    expect(detector.feed(rst())).toBeUndefined();
  });
});

describe('PanicDetector', () => {
  const feedAll = (detector: PanicDetector, lines: string[]) =>
    lines.map((line) => detector.feed(parseConsoleLine(line))).filter((r) => r !== undefined);

  it('gathers a Guru Meditation dump up to Rebooting...', () => {
    const seen: PanicReport[] = [];
    const detector = new PanicDetector({ onReport: (r) => seen.push(r) });
    const reports = feedAll(detector, ['I (5) Application: fine', ...GURU_DUMP, ...ESP32S3_BOOT]);
    expect(reports).toEqual([
      {
        panic: 'guru',
        reason:
          "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
        lines: GURU_DUMP,
        backtrace: ['0x4037a1f3', '0x4037f2a1', '0x42012c4b'],
        endedBy: 'reboot',
      },
    ]);
    expect(seen).toEqual(reports);
    expect(detector.collecting).toBe(false);
  });

  it('gathers an abort as the virtual board prints it, ended by the rst: line', () => {
    const detector = new PanicDetector();
    const reports = feedAll(detector, [
      'abort() was called at PC 0x4037a1f6 on core 1',
      '',
      'Backtrace: 0x4037a1f3:0x3fcb7b90 0x4037f2a1:0x3fcb7bb0',
      'ESP-ROM:esp32s3-20210327',
      'Build:Mar 27 2021',
      'rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)',
    ]);
    expect(reports).toHaveLength(1);
    expect(reports[0]).toMatchObject({
      panic: 'abort',
      backtrace: ['0x4037a1f3', '0x4037f2a1'],
      endedBy: 'reset',
    });
    expect(reports[0]?.lines).not.toContain(
      'rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)',
    );
  });

  it('keeps the first panic line as the reason when another follows in the same dump', () => {
    const detector = new PanicDetector();
    const [report] = feedAll(detector, [
      "terminate called after throwing an instance of 'std::bad_alloc'",
      '  what():  std::bad_alloc',
      '',
      'abort() was called at PC 0x40386f2e on core 0',
      'Backtrace: 0x40375a1e:0x3fc9d6f0',
      'Rebooting...',
    ]);
    expect(report).toMatchObject({
      panic: 'cxx-exception',
      backtrace: ['0x40375a1e'],
      endedBy: 'reboot',
    });
    expect(report?.lines).toHaveLength(6);
  });

  it('ends a task watchdog report when the app logs on (it did not panic)', () => {
    const detector = new PanicDetector();
    const reports = feedAll(detector, [
      'E (65432) task_wdt: Task watchdog got triggered. The following tasks/users did not reset the watchdog in time:',
      'E (65432) task_wdt:  - IDLE0 (CPU 0)',
      'E (65432) task_wdt: Tasks currently running:',
      'E (65432) task_wdt: CPU 0: audio_loop',
      'E (65432) task_wdt: Print CPU 0 (current core) backtrace',
      'Backtrace: 0x42009a3e:0x3fc98c10 0x4037a0f1:0x3fc98c30',
      'I (65500) Application: still alive',
    ]);
    expect(reports).toEqual([
      expect.objectContaining({
        panic: 'task-wdt',
        endedBy: 'resumed',
        backtrace: ['0x42009a3e', '0x4037a0f1'],
      }),
    ]);
    expect(reports[0]?.lines).toHaveLength(6);
  });

  it('ends a dump that goes on too long, and gives an open one on flush', () => {
    const detector = new PanicDetector({ maxLines: 3 });
    const reports = feedAll(detector, ['Brownout detector was triggered', 'x', 'y', 'z']);
    expect(reports).toEqual([
      expect.objectContaining({
        panic: 'brownout',
        endedBy: 'limit',
        lines: ['Brownout detector was triggered', 'x', 'y'],
      }),
    ]);
    expect(detector.flush()).toBeUndefined();
    feedAll(detector, ['assert failed: foo bar.c:1 (x)', 'more']);
    expect(detector.snapshot()).toMatchObject({
      panic: 'assert',
      lines: ['assert failed: foo bar.c:1 (x)', 'more'],
    });
    expect(detector.flush()).toMatchObject({ panic: 'assert', endedBy: 'flush', backtrace: [] });
    expect(detector.snapshot()).toBeUndefined();
  });

  it('ignores backtraces and Rebooting... outside a dump', () => {
    const detector = new PanicDetector();
    expect(
      feedAll(detector, ['Backtrace: 0x1:0x2', 'Rebooting...', 'I (1) Application: Rebooting...']),
    ).toEqual([]);
    expect(detector.collecting).toBe(false);
  });
});
