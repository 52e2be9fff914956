import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import type { ExpectOptions } from './console-expect.js';
import { ConsoleExpect, ExpectError } from './console-expect.js';
import { SerialError } from './errors.js';

const GURU_DUMP = [
  "Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
  '',
  'Core  1 register dump:',
  'PC      : 0x42012c4e  PS      : 0x00060a30  A0      : 0x82013a6d  A1      : 0x3fcb7d10',
  '',
  'Backtrace: 0x4037a1f3:0x3fcb7b90 0x4037f2a1:0x3fcb7bb0 0x42012c4b:0x3fcb7d10',
  '',
  'ELF file SHA256: c1b2f3e4a5d69788',
  '',
  'Rebooting...',
];
const RST = 'rst:0xc (RTC_SW_CPU_RST),boot:0x8 (SPI_FAST_FLASH_BOOT)';

const text = (lines: string[]): string => lines.map((line) => `${line}\r\n`).join('');

/** The settled outcome of a promise without awaiting timers: 'pending' until it settles. */
function track<T>(promise: Promise<T>) {
  const state: { status: 'pending' | 'resolved' | 'rejected'; value?: T; error?: unknown } = {
    status: 'pending',
  };
  promise.then(
    (value) => {
      state.status = 'resolved';
      state.value = value;
    },
    (error: unknown) => {
      state.status = 'rejected';
      state.error = error;
    },
  );
  return state;
}

async function failure(promise: Promise<unknown>): Promise<ExpectError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof ExpectError) return error;
    throw error;
  }
  throw new Error('expected the wait to fail');
}

const flushMicrotasks = () => vi.advanceTimersByTimeAsync(0);

beforeEach(() => {
  vi.useFakeTimers();
});
afterEach(() => {
  vi.useRealTimers();
});

describe('ConsoleExpect.expect', () => {
  it('matches a line that arrives across chunks', async () => {
    const con = new ConsoleExpect();
    const wait = con.expect(/Network connected/);
    con.feed('I (2102) App');
    con.feed(new TextEncoder().encode('lication: Network con'));
    con.feed('nected\r');
    con.feed('\nI (2103) next');
    const { match, line, record } = await wait;
    expect(match[0]).toBe('Network connected');
    expect(line).toBe('I (2102) Application: Network connected');
    expect(record).toMatchObject({ kind: 'log', tag: 'Application', ms: 2102 });
    expect(vi.getTimerCount()).toBe(0);
  });

  it('matches lines already seen, and consumes up to the match', async () => {
    const con = new ConsoleExpect();
    con.feed(
      text([
        'I (1) StateMachine: State: starting -> activating',
        'I (2) StateMachine: State: activating -> idle',
      ]),
    );
    const first = await con.expect(/State: (\S+) -> (\S+)/);
    expect(first.match.slice(1)).toEqual(['starting', 'activating']);
    const second = await con.expect(/State: (\S+) -> (\S+)/);
    expect(second.match.slice(1)).toEqual(['activating', 'idle']);
    // the first line is consumed: the next wait needs a new one
    const third = con.expect(/State: starting/, { timeoutMs: 100 });
    con.feed('I (3) StateMachine: State: starting -> x\n');
    expect((await third).line).toBe('I (3) StateMachine: State: starting -> x');
    expect(con.lines).toHaveLength(3);
  });

  it('takes a string as literal text, and strips colours before matching', async () => {
    const con = new ConsoleExpect();
    con.feed('\x1b[0;32mI (5) x: rst:0x1 (POWERON) a.b\x1b[0m\n');
    const { line } = await con.expect('rst:0x1 (POWERON) a.b');
    expect(line).toBe('I (5) x: rst:0x1 (POWERON) a.b');
    con.feed('I (6) x: aXb\n');
    const wait = failure(con.expect('a.b', { timeoutMs: 10 }));
    await vi.advanceTimersByTimeAsync(10);
    expect((await wait).code).toBe('EXPECT_TIMEOUT');
  });

  it('ignores the state of global regexes', async () => {
    const con = new ConsoleExpect();
    const re = /ready/g;
    con.feed('ready\nready\n');
    await con.expect(re);
    await con.expect(re);
    expect(re.lastIndex).toBe(0);
  });

  it('fails with the pattern, the wait, the last 40 lines and the log path on timeout', async () => {
    const con = new ConsoleExpect({ logPath: '/tmp/hil/board-1.log' });
    for (let i = 0; i < 50; i++) con.feed(`I (${i}) Tick: line ${i}\n`);
    const state = track(con.expect(/Application: Network connected/, { timeoutMs: 5000 }));
    await vi.advanceTimersByTimeAsync(4999);
    expect(state.status).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(state.status).toBe('rejected');
    const error = state.error;
    if (!(error instanceof ExpectError)) throw new Error('not an ExpectError');
    expect(error).toBeInstanceOf(SerialError);
    expect(error.name).toBe('ExpectError');
    expect(error.code).toBe('EXPECT_TIMEOUT');
    expect(error.pattern).toBe('/Application: Network connected/');
    expect(error.waitedMs).toBe(5000);
    expect(error.logPath).toBe('/tmp/hil/board-1.log');
    expect(error.tail).toHaveLength(40);
    expect(error.tail[0]).toBe('I (10) Tick: line 10');
    expect(error.tail.at(-1)).toBe('I (49) Tick: line 49');
    expect(error.message).toContain(
      'timed out after 5000 ms waiting for /Application: Network connected/',
    );
    expect(error.message).toContain('last 40 lines:\n  | I (10) Tick: line 10\n');
    expect(error.message).toContain('  | I (49) Tick: line 49');
    expect(error.message).not.toContain('line 9\n');
    expect(error.message).toContain('full log: /tmp/hil/board-1.log');
    expect(vi.getTimerCount()).toBe(0);
  });

  it('says when there was no output and no log file', async () => {
    const con = new ConsoleExpect();
    const wait = failure(con.expect('Board: UUID=', { timeoutMs: 1000 }));
    await vi.advanceTimersByTimeAsync(1000);
    const error = await wait;
    expect(error.message).toBe(
      'timed out after 1000 ms waiting for "Board: UUID="\nno console output\nfull log: not saved',
    );
  });

  it('fails early on a forbidden pattern', async () => {
    const con = new ConsoleExpect({ logPath: 'run.log' });
    const options: ExpectOptions = {
      timeoutMs: 60_000,
      forbidden: [/Failed to receive server hello/],
    };
    const state = track(con.expect(/Session ID/, options));
    await vi.advanceTimersByTimeAsync(1500);
    con.feed('I (1) WS: Connecting to websocket server: ws://x with version: 1\n');
    con.feed('E (2) WS: Failed to receive server hello\n');
    await flushMicrotasks();
    expect(state.status).toBe('rejected');
    const error = state.error as ExpectError;
    expect(error.code).toBe('EXPECT_FORBIDDEN');
    expect(error.waitedMs).toBe(1500);
    expect(error.reason).toBe(
      'forbidden /Failed to receive server hello/: E (2) WS: Failed to receive server hello',
    );
    expect(error.message).toContain('(after 1500 ms waiting for /Session ID/)');
    expect(error.message).toContain('full log: run.log');
    expect(vi.getTimerCount()).toBe(0);
  });

  it('finds a forbidden line already in the buffer', async () => {
    const con = new ConsoleExpect();
    con.feed('E (2) WS: Failed to receive server hello\nI (3) WS: Session ID: s\n');
    const error = await failure(con.expect(/Session ID/, { forbidden: ['panic', /hello/] }));
    expect(error.code).toBe('EXPECT_FORBIDDEN');
  });

  it('fails on a panic by default, with the reason and the backtrace', async () => {
    const con = new ConsoleExpect({ logPath: 'out/serial.log' });
    const state = track(con.expect(/Application: Network connected/));
    con.feed(text(['I (5) Application: Activating... 1/10', ...GURU_DUMP]));
    await flushMicrotasks();
    expect(state.status).toBe('rejected');
    const error = state.error as ExpectError;
    expect(error.code).toBe('EXPECT_FORBIDDEN');
    expect(error.reason).toBe(
      "panic: Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled.",
    );
    expect(error.panic?.backtrace).toEqual(['0x4037a1f3', '0x4037f2a1', '0x42012c4b']);
    expect(error.message.split('\n')[0]).toBe(
      "panic: Guru Meditation Error: Core  1 panic'ed (LoadProhibited). Exception was unhandled." +
        ' (after 0 ms waiting for /Application: Network connected/)',
    );
    expect(error.message).toContain('backtrace: 0x4037a1f3 0x4037f2a1 0x42012c4b');
    expect(error.message).toContain('  | Rebooting...');
    expect(error.message).toContain('full log: out/serial.log');
    expect(con.panics).toHaveLength(1);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('waits a little for the rest of a panic dump, then fails with what it has', async () => {
    const con = new ConsoleExpect({ panicGraceMs: 500 });
    const state = track(con.expect(/never/, { timeoutMs: 10_000 }));
    con.feed('abort() was called at PC 0x4037a1f6 on core 1\r\n\r\n');
    await vi.advanceTimersByTimeAsync(499);
    expect(state.status).toBe('pending');
    await vi.advanceTimersByTimeAsync(1);
    expect(state.status).toBe('rejected');
    const error = state.error as ExpectError;
    expect(error.code).toBe('EXPECT_FORBIDDEN');
    expect(error.reason).toBe('panic: abort() was called at PC 0x4037a1f6 on core 1');
    expect(error.panic?.lines).toEqual(['abort() was called at PC 0x4037a1f6 on core 1', '']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a panic met in the buffer fails at once when its dump is complete', async () => {
    const con = new ConsoleExpect();
    con.feed(text([...GURU_DUMP, RST, 'I (300) Application: Network connected']));
    const error = await failure(con.expect(/Network connected/));
    expect(error.panic?.endedBy).toBe('reboot');
    // after the caller has dealt with the crash, the read position can skip it
    con.discard();
    con.feed('I (301) Application: Network connected\n');
    await expect(con.expect(/Network connected/)).resolves.toMatchObject({
      line: 'I (301) Application: Network connected',
    });
  });

  it('still matches a panic line it was asked for', async () => {
    const con = new ConsoleExpect();
    con.feed(text(GURU_DUMP));
    const { record } = await con.expect(/Guru Meditation Error: Core\s+(\d) panic'ed \((\w+)\)/);
    expect(record).toMatchObject({ kind: 'panic', panic: 'guru' });
  });

  it('lets a panic pass when forbidden is empty', async () => {
    const con = new ConsoleExpect();
    const state = track(con.expect(/Network connected/, { timeoutMs: 1000, forbidden: [] }));
    con.feed(text(GURU_DUMP));
    await flushMicrotasks();
    expect(state.status).toBe('pending');
    await vi.advanceTimersByTimeAsync(1000);
    expect((state.error as ExpectError).code).toBe('EXPECT_TIMEOUT');
  });

  it('fails on a boot loop when asked', async () => {
    const con = new ConsoleExpect({ bootLoop: { resets: 3, windowMs: 30_000 } });
    const state = track(con.expect(/State: \S+ -> idle/, { forbidden: ['panic', 'boot-loop'] }));
    for (let i = 0; i < 3; i++) {
      con.feed(text(['ESP-ROM:esp32s3-20210327', RST, 'I (300) Application: Activating... 1/10']));
      await vi.advanceTimersByTimeAsync(4000);
    }
    expect(state.status).toBe('rejected');
    const error = state.error as ExpectError;
    expect(error.code).toBe('EXPECT_FORBIDDEN');
    expect(error.bootLoop?.resets).toBe(3);
    expect(error.reason).toBe(
      'boot loop: 3 resets in 8000 ms (RTC_SW_CPU_RST, RTC_SW_CPU_RST, RTC_SW_CPU_RST)',
    );
  });

  it('rejects a timeout that is not finite', async () => {
    const con = new ConsoleExpect();
    const error = await con
      .expect(/x/, { timeoutMs: Number.POSITIVE_INFINITY })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SerialError);
    expect((error as SerialError).code).toBe('OPTION_INVALID');
  });

  it('uses the injected clock and timers', async () => {
    vi.useRealTimers();
    let now = 1000;
    const scheduled: { callback: () => void; ms: number }[] = [];
    const con = new ConsoleExpect({
      now: () => now,
      timers: {
        setTimeout: (callback, ms) => scheduled.push({ callback, ms }),
        clearTimeout: () => {},
      },
    });
    const wait = failure(con.expect(/x/, { timeoutMs: 250 }));
    expect(scheduled.map((s) => s.ms)).toEqual([250]);
    now = 1250;
    scheduled[0]?.callback();
    const error = await wait;
    expect(error.waitedMs).toBe(250);
  });

  it('keeps only bufferLimit lines', async () => {
    const con = new ConsoleExpect({ bufferLimit: 5 });
    for (let i = 0; i < 12; i++) con.feed(`line ${i}\n`);
    expect(con.lines).toEqual(['line 7', 'line 8', 'line 9', 'line 10', 'line 11']);
    await expect(con.expect('line 9')).resolves.toMatchObject({ line: 'line 9' });
    const wait = failure(con.expect('line 3', { timeoutMs: 10 }));
    await vi.advanceTimersByTimeAsync(10);
    expect((await wait).code).toBe('EXPECT_TIMEOUT');
  });

  it('lets go of a wait its caller no longer needs: rejected with the reason, nothing consumed, no timer left', async () => {
    const con = new ConsoleExpect();
    const stop = new AbortController();
    const wait = track(con.expect(/App version/, { timeoutMs: 30_000, signal: stop.signal }));
    await flushMicrotasks();
    stop.abort(new Error('the OTA check came first'));
    await flushMicrotasks();
    expect(wait.status).toBe('rejected');
    expect((wait.error as Error).message).toBe('the OTA check came first');
    expect(vi.getTimerCount()).toBe(0);
    // A line that comes later is still there for the next wait.
    con.feed('I (9) app_init: App version:      2.4.2\n');
    await expect(con.expect(/App version/)).resolves.toMatchObject({
      line: 'I (9) app_init: App version:      2.4.2',
    });
    await expect(con.expect(/x/, { signal: stop.signal })).rejects.toThrow(
      'the OTA check came first',
    );
  });
});

describe('ConsoleExpect.close', () => {
  it('rejects pending waits with the reason', async () => {
    const con = new ConsoleExpect({ logPath: 'x.log' });
    const a = track(con.expect(/a/));
    const b = track(con.expectAll([/b/, /c/]));
    con.feed('b\n');
    con.close('port lost: /dev/ttyACM0 disappeared');
    await flushMicrotasks();
    for (const state of [a, b]) {
      expect(state.status).toBe('rejected');
      expect((state.error as ExpectError).code).toBe('EXPECT_CLOSED');
      expect((state.error as ExpectError).message).toContain(
        'console closed (port lost: /dev/ttyACM0 disappeared)',
      );
    }
    expect((b.error as ExpectError).pattern).toBe('all of /c/');
    expect(vi.getTimerCount()).toBe(0);
    expect(con.closed).toBe(true);
  });

  it('takes the last unfinished line first', async () => {
    const con = new ConsoleExpect();
    const wait = con.expect('Rebooting...');
    con.feed('I (1) x: y\nRebooting...');
    con.close();
    await expect(wait).resolves.toMatchObject({ line: 'Rebooting...' });
  });

  it('fails a later wait at once unless the buffer has the line, and ignores later output', async () => {
    const con = new ConsoleExpect();
    con.feed('hello\n');
    con.close('done');
    await expect(con.expect('hello')).resolves.toMatchObject({ line: 'hello' });
    con.feed('world\n');
    const error = await failure(con.expect('world'));
    expect(error.code).toBe('EXPECT_CLOSED');
    expect(error.waitedMs).toBe(0);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('reports a panic cut short by the close as the panic', async () => {
    const con = new ConsoleExpect();
    const wait = failure(con.expect(/never/));
    con.feed(text(GURU_DUMP.slice(0, 6)));
    con.close('port lost');
    const error = await wait;
    expect(error.code).toBe('EXPECT_FORBIDDEN');
    expect(error.panic).toMatchObject({
      endedBy: 'flush',
      backtrace: ['0x4037a1f3', '0x4037f2a1', '0x42012c4b'],
    });
  });
});

describe('ConsoleExpect.expectAll', () => {
  it('waits for every pattern in any order and returns them in pattern order', async () => {
    const con = new ConsoleExpect();
    const wait = con.expectAll([
      'MCP: Add tool: self.a',
      'MCP: Add tool: self.b',
      /Board: UUID=(\S+)/,
    ]);
    con.feed(
      text([
        'I (1) MCP: Add tool: self.b',
        'I (2) Board: UUID=u-1 SKU=s',
        'I (3) Other: noise',
        'I (4) MCP: Add tool: self.a',
        'I (5) after',
      ]),
    );
    const results = await wait;
    expect(results.map((r) => r.line)).toEqual([
      'I (4) MCP: Add tool: self.a',
      'I (1) MCP: Add tool: self.b',
      'I (2) Board: UUID=u-1 SKU=s',
    ]);
    expect(results[2]?.match[1]).toBe('u-1');
    // consumed through the last match
    await expect(con.expect(/.+/)).resolves.toMatchObject({ line: 'I (5) after' });
  });

  it('lets one line satisfy several patterns', async () => {
    const con = new ConsoleExpect();
    con.feed('I (1) WS: Session ID: abc\n');
    const results = await con.expectAll([/WS/, /Session ID: (\w+)/]);
    expect(results.map((r) => r.line)).toEqual([
      'I (1) WS: Session ID: abc',
      'I (1) WS: Session ID: abc',
    ]);
  });

  it('names only the missing patterns when it times out', async () => {
    const con = new ConsoleExpect();
    const wait = failure(con.expectAll(['one', 'two', 'three'], { timeoutMs: 3000 }));
    con.feed('two\n');
    await vi.advanceTimersByTimeAsync(3000);
    const error = await wait;
    expect(error.pattern).toBe('all of "one", "three"');
    expect(error.message).toContain('timed out after 3000 ms waiting for all of "one", "three"');
  });

  it('is done at once for no patterns', async () => {
    await expect(new ConsoleExpect().expectAll([])).resolves.toEqual([]);
  });

  it('does not let a matched line fail the wait even if it is forbidden', async () => {
    const con = new ConsoleExpect();
    con.feed('E (1) WS: Websocket disconnected\nI (2) done\n');
    const results = await con.expectAll([/disconnected/, /done/], { forbidden: [/disconnected/] });
    expect(results).toHaveLength(2);
  });
});
