/**
 * Verdicts you can trust (docs/hil.md §5): a firmware fault while the session opens fails a
 * named `session.*` check at once (exit 1), not the rig after the session wait (exit 3); bad
 * input exits 2 before any board is touched, naming the field or the choices; the GitHub step
 * summary is written with the default reporters.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { buildVirtualFirmware } from '@xiaozhi-mcp/firmware';
import { describe, expect, it } from 'vitest';
import { hil } from './hil-main.test-helper.js';
import type { BoardConfig } from './inventory.js';
import type { BoardReport, RunReport } from './model.js';

const hilBin = join(resolve(dirname(fileURLToPath(import.meta.url)), '..'), 'bin/hil.js');

function rig(boards: BoardConfig[] | unknown): { dir: string; config: string; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'hil-verdict-'));
  const config = join(dir, 'hil.config.json');
  writeFileSync(
    config,
    JSON.stringify(Array.isArray(boards) ? { wifi: { ssid: 'lab' }, boards } : boards),
  );
  return { dir, config, out: join(dir, 'out') };
}

const board = (name: string, faults: Record<string, unknown> = {}): BoardConfig => ({
  name,
  port: `virtual:${name}`,
  chip: 'esp32s3',
  variant: 'bread-compact-wifi',
  session: 'boot-click',
  virtual: { preset: 'bread-compact-wifi', faults },
});

function reportOf(out: string): RunReport {
  return JSON.parse(readFileSync(join(out, 'report.json'), 'utf8')) as RunReport;
}

/** One faulty board through `initialize`: its report and the run's exit code. */
async function faulty(
  faults: Record<string, unknown>,
): Promise<{ code: number; stdout: string; board: BoardReport }> {
  const { config, out } = rig([board('faulty', faults)]);
  const result = await hil('run', '--config', config, '--out', out, '--suite', 'initialize');
  const [only] = reportOf(out).boards;
  if (only === undefined) throw new Error('no board in the report');
  return { code: result.code, stdout: result.stdout, board: only };
}

function check(board: BoardReport, id: string) {
  return board.checks.find((c) => c.id === id);
}

/** The session step stopped by a failed check, quickly, and the suites not run. */
function expectStoppedAtSession(board: BoardReport, id: string): void {
  expect(board.status).toBe('failed');
  expect(board.failure).toBeUndefined();
  const session = board.steps.find((s) => s.step === 'session');
  expect(session).toMatchObject({ status: 'failed', check: id });
  // Stopped by the check, not by the session wait (30 s) running out.
  expect(session?.durationMs).toBeLessThan(30_000);
  expect(board.steps.find((s) => s.step === 'suites')).toMatchObject({ status: 'skipped' });
}

describe('a firmware fault while the session opens fails a named session check (exit 1)', () => {
  it('a hello without transport: session.hello-transport, with the reason, at once', async () => {
    const { code, stdout, board: b } = await faulty({ helloWithout: ['transport'] });
    expect(code).toBe(1);
    expect(check(b, 'session.hello-transport')).toMatchObject({
      status: 'failed',
      message: 'expected "transport":"websocket", got no transport',
    });
    expect(check(b, 'session.hello')).toMatchObject({ status: 'passed' });
    expect(check(b, 'session.hello-mcp')).toMatchObject({ status: 'passed' });
    expect(check(b, 'session.initialize')).toMatchObject({ status: 'skipped' });
    expectStoppedAtSession(b, 'session.hello-transport');
    expect(stdout).toMatch(/session\.hello-transport {2}\[critical\]/);
    expect(stdout).toMatch(/Exit code 1: a check failed/);
    expect(stdout).not.toMatch(/rig\.session/);
  });

  it('a hello without features.mcp: session.hello-mcp fails, and the suites still run', async () => {
    const { code, board: b } = await faulty({ helloWithout: ['features.mcp'] });
    expect(code).toBe(1);
    expect(check(b, 'session.hello-mcp')).toMatchObject({
      status: 'failed',
      message: 'expected "features":{"mcp":true}, got "features":{"glyph_push":false}',
    });
    // The session opened, so the suites ran; the step is failed all the same, naming its check,
    // and the suites step, whose checks passed, is not blamed for it.
    expect(b.steps.find((s) => s.step === 'session')).toMatchObject({
      status: 'failed',
      check: 'session.hello-mcp',
    });
    expect(b.steps.find((s) => s.step === 'suites')?.status).toBe('passed');
    expect(b.failure).toBeUndefined();
    expect(check(b, 'initialize.reply-shape')?.status).toBe('passed');
  });

  it('an initialize reply without serverInfo: session.initialize, at once', async () => {
    const { code, board: b } = await faulty({ initializeWithout: ['serverInfo'] });
    expect(code).toBe(1);
    expect(check(b, 'session.initialize')).toMatchObject({
      status: 'failed',
      message: expect.stringMatching(
        /^expected serverInfo \{name, version\}, got \{"protocolVersion"/,
      ),
    });
    expect(check(b, 'session.hello')?.status).toBe('passed');
    expectStoppedAtSession(b, 'session.initialize');
  });

  it('a tools/list walk that loops: session.tools-walk, at once', async () => {
    const { code, board: b } = await faulty({ cursorLoop: true });
    expect(code).toBe(1);
    expect(check(b, 'session.tools-walk')).toMatchObject({
      status: 'failed',
      message: expect.stringMatching(
        /page 1 of the plain walk: nextCursor "self\.get_device_status" names a tool already listed \(page 1\): the walk never ends/,
      ),
    });
    expect(check(b, 'session.initialize')?.status).toBe('passed');
    expectStoppedAtSession(b, 'session.tools-walk');
  });

  it('a healthy board passes every session check', async () => {
    const { code, board: b } = await faulty({});
    expect(code).toBe(0);
    expect(b.checks.filter((c) => c.suite === 'session').map((c) => `${c.id}:${c.status}`)).toEqual(
      [
        'session.hello:passed',
        'session.hello-version:passed',
        'session.hello-mcp:passed',
        'session.hello-transport:passed',
        'session.initialize:passed',
        'session.tools-walk:passed',
      ],
    );
  });
});

describe('bad input exits 2 before any board is touched, naming the field or the choices', () => {
  /** Exit 2, the message on stderr, no board step on stdout and no report. */
  async function refused(argv: string[], message: RegExp, out: string): Promise<void> {
    const result = await hil(...argv);
    expect(result.stderr).toMatch(message);
    expect(result.stderr).not.toMatch(/rig failed|TypeError|Cannot read/);
    expect(result.code).toBe(2);
    expect(result.stdout).not.toMatch(/\] open /);
    expect(() => readFileSync(join(out, 'report.json'))).toThrow();
  }

  it('refuses a --firmware that is empty, random, or for another chip', async () => {
    const { dir, config, out } = rig([board('one')]);
    const empty = join(dir, 'empty.bin');
    writeFileSync(empty, '');
    await refused(
      ['run', '--config', config, '--out', out, '--firmware', empty],
      /--firmware .*empty\.bin is empty/,
      out,
    );
    const random = join(dir, 'random.bin');
    writeFileSync(random, Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 251)));
    await refused(
      ['run', '--config', config, '--out', out, '--firmware', random],
      /--firmware .*random\.bin is neither a merged image/,
      out,
    );
    const c3 = join(dir, 'c3.bin');
    writeFileSync(
      c3,
      buildVirtualFirmware({ chip: 'esp32c3', version: '2.4.2', board: 'bread-compact-wifi' })
        .merged,
    );
    await refused(
      ['run', '--config', config, '--out', out, '--firmware', c3],
      /--firmware .*c3\.bin is a build for esp32c3, but the rig's board one \(esp32s3\) is not/,
      out,
    );
    const merged = join(dir, 'merged.bin');
    writeFileSync(
      merged,
      buildVirtualFirmware({ chip: 'esp32s3', version: '2.4.3', board: 'bread-compact-wifi' })
        .merged,
    );
    await refused(
      ['run', '--config', config, '--out', out, '--ota-image', merged],
      /--ota-image .*merged\.bin is a merged image: the OTA upgrade takes the app image/,
      out,
    );
  });

  it('refuses an inventory {} naming the missing field, without a JavaScript error', async () => {
    const { config, out } = rig({});
    await refused(['run', '--config', config, '--out', out], /^hil: .*boards is required/, out);
  });

  it('refuses --board with an unknown name, listing the boards there are', async () => {
    const { config, out } = rig([board('one'), board('two')]);
    await refused(
      ['run', '--config', config, '--out', out, '--board', 'nosuch'],
      /--board nosuch: no such board in the inventory; boards: one, two/,
      out,
    );
  });

  it('refuses an --out that is a file', async () => {
    const { dir, config } = rig([board('one')]);
    const file = join(dir, 'taken');
    writeFileSync(file, 'not a folder');
    const result = await hil('run', '--config', config, '--out', file);
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/--out .*taken is a file, not a folder/);
    expect(result.stdout).not.toMatch(/\] open /);
  });
});

describe('the suites step is as good as its checks', () => {
  it('fails when a check failed, naming the first, in the console, report.json, JUnit and HTML', async () => {
    const { config, out } = rig([board('dut', { regressions: ['wrong-id'] })]);
    const result = await hil('run', '--config', config, '--out', out, '--suite', 'tools-call');
    expect(result.code, result.stdout).toBe(1);
    const [dut] = reportOf(out).boards;
    const failed = dut?.checks.filter((c) => c.status === 'failed').map((c) => c.id) ?? [];
    expect(failed[0]).toBe('tools-call.reply-id');
    const suites = dut?.steps.find((s) => s.step === 'suites');
    expect(suites).toMatchObject({
      status: 'failed',
      check: 'tools-call.reply-id',
      message: expect.stringContaining(`${failed.length} failed`),
    });
    // A failed check, not the rig's: the board failed (exit 1), no rig failure.
    expect(dut?.status).toBe('failed');
    expect(dut?.failure).toBeUndefined();
    expect(result.stdout).toMatch(/\[dut\] suites ✗ /);
    expect(result.stdout).not.toMatch(/\[dut\] suites ✓/);
    expect(result.stdout).not.toMatch(/rig\.suites/);
    const junit = readFileSync(join(out, 'junit.xml'), 'utf8');
    expect(junit).toContain('<property name="step.suites" value="failed (tools-call.reply-id)"/>');
    expect(junit).not.toContain('name="rig.suites"');
    const html = readFileSync(join(out, 'report.html'), 'utf8');
    expect(html).toMatch(
      /<tr class="step failed" data-testid="step-row" data-step="suites"><td>suites<\/td><td><span class="pill failed">failed<\/span>/,
    );
  });
});

describe('the GitHub step summary', () => {
  it('is written, not empty, with the default reporters (the bin exits right after)', async () => {
    const { dir, config, out } = rig([board('one')]);
    const summary = join(dir, 'summary', 'step-summary.md');
    mkdirSync(dirname(summary), { recursive: true });
    writeFileSync(summary, '');
    const child = spawn(
      process.execPath,
      [hilBin, 'run', '--config', config, '--out', out, '--suite', 'initialize'],
      {
        cwd: dir,
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, GITHUB_STEP_SUMMARY: summary, CI: 'true' },
      },
    );
    // Read, so a full pipe never stalls the child; 'close' comes once all of it is read.
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
    });
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
    });
    const [code] = await once(child, 'close');
    expect(code, output).toBe(0);
    const text = readFileSync(summary, 'utf8');
    expect(text).toMatch(/^## ✅ hil: all \d+ checks passed/);
    expect(text).toContain('Exit code **0**');
  });
});
