#!/usr/bin/env node
// `xiaozhi-mcp bridge` against MCP software nobody here wrote, from the npm registry: the MCP
// Inspector's CLI (over stdio and over Streamable HTTP) and the conformance suite's server
// scenarios (`@modelcontextprotocol/conformance`, over Streamable HTTP). Both need Node 22,
// which npm ships as the package `node@22`: `npx -p node@22 -p <tool> <bin>` runs them on it
// without touching the project's Node 20.
//
//   npx turbo run build --filter=@xiaozhi-mcp/cli     # the binary this runs
//   node scripts/mcp-interop.mjs [--out DIR] [--inspector PKG] [--conformance PKG] [--node PKG]
//
// It starts `xiaozhi-mcp serve` (port 0, an API token) and two `xiaozhi-mcp sim` boards
// (bread-compact-wifi, otto-robot), then the bridge the way each tool reaches it, and prints what
// each tool reported, step by step and scenario by scenario. It downloads packages, so it is a
// script, not part of `npm test`. Exit 0 when every step and every scenario the bridge can pass
// passed (the conformance scenarios that call the suite's own reference tools, resources and
// prompts are reported, and not counted); 1 otherwise.
//
// The tools' versions are pinned to the ones last run (--inspector, default
// @modelcontextprotocol/inspector@2.12.0; --conformance, default
// @modelcontextprotocol/conformance@0.1.16; --node, default node@22). The Inspector must be
// pinned to 2.x at least: npm, running on Node 20, otherwise picks the newest release whose
// `engines` accept Node 20 (0.15).
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const cli = join(root, 'apps/cli/bin/xiaozhi-mcp.js');
const argv = process.argv.slice(2);
/** `--name VALUE` from the command line, else `fallback`. */
function flag(name, fallback) {
  const at = argv.indexOf(name);
  const value = at >= 0 ? argv[at + 1] : undefined;
  return value === undefined ? fallback : value;
}
const INSPECTOR = flag('--inspector', '@modelcontextprotocol/inspector@2.12.0');
const CONFORMANCE = flag('--conformance', '@modelcontextprotocol/conformance@0.1.16');
const NODE = flag('--node', 'node@22');
/** First runs download the tools: generous. */
const TOOL_TIMEOUT_MS = 600_000;

/**
 * Conformance scenarios that need what the suite's reference server has and a board has not:
 * its fixture tools (`test_simple_text`, `json_schema_2020_12_tool`, ...), resources, prompts,
 * logging, completion. Their failures are printed, not counted.
 */
const NEEDS_REFERENCE_SERVER =
  /^(tools-call-|elicitation-|resources-|prompts-|logging-|completion-|json-schema-)/;

const given = flag('--out', '');
const out = given === '' ? mkdtempSync(join(tmpdir(), 'mcp-interop-')) : resolve(given);
mkdirSync(out, { recursive: true });

if (!existsSync(join(root, 'apps/cli/dist/bin.js'))) {
  console.error('mcp-interop: build first: npx turbo run build --filter=@xiaozhi-mcp/cli');
  process.exit(1);
}

/** @type {import('node:child_process').ChildProcess[]} */
const children = [];
/** @type {{ step: string; ok: boolean; note: string }[]} */
const results = [];

function record(step, ok, note) {
  results.push({ step, ok, note });
  console.log(`${ok ? 'PASS' : 'FAIL'}  ${step}${note === '' ? '' : `: ${note}`}`);
}

/** A long-running child whose stdout is collected; stderr goes to a file-like buffer. */
function background(args) {
  const child = spawn(process.execPath, [cli, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  const io = { stdout: '', stderr: '' };
  child.stdout?.on('data', (chunk) => {
    io.stdout += chunk.toString();
  });
  child.stderr?.on('data', (chunk) => {
    io.stderr += chunk.toString();
  });
  return { child, io };
}

async function until(check, what, timeoutMs = 60_000) {
  const end = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Runs `npx -y -p node@22 -p <pkg> <bin> ...args` from a scratch directory; never throws. */
function npx(pkg, bin, args) {
  return new Promise((resolveRun) => {
    const child = spawn('npx', ['-y', '-p', NODE, '-p', pkg, bin, ...args], {
      cwd: out,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), TOOL_TIMEOUT_MS);
    child.on('close', (code) => {
      clearTimeout(timer);
      // npm's own warnings (engines: npm itself runs on Node 20) are not the tool's words.
      const own = stderr
        .split('\n')
        .filter((line) => !line.startsWith('npm warn') && line.trim() !== '')
        .join('\n');
      resolveRun({ code, stdout, stderr: own });
    });
  });
}

function parseJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/** A reason cut at 300 characters (a missing tool's message lists every tool served). */
function short(text) {
  return text.length > 300 ? `${text.slice(0, 300)}...` : text;
}

function indent(text) {
  return text
    .trim()
    .split('\n')
    .map((line) => `      ${line}`)
    .join('\n');
}

/** One Inspector run, printed verbatim (long tool lists shortened to their names). */
async function inspector(step, target, method, check) {
  const run = await npx(INSPECTOR, 'mcp-inspector', ['--cli', ...target, ...method]);
  const body = parseJson(run.stdout);
  let verdict;
  try {
    verdict = check(run, body);
  } catch (error) {
    verdict = { ok: false, note: error instanceof Error ? error.message : String(error) };
  }
  record(step, verdict.ok, `${verdict.note} (exit ${run.code})`);
  const shown =
    body !== undefined && Array.isArray(body.tools)
      ? `{"tools": [${body.tools.length} tools: ${body.tools.map((t) => t.name).join(', ')}]}`
      : run.stdout;
  if (shown.trim() !== '') console.log(`      stdout:\n${indent(shown)}`);
  if (run.stderr.trim() !== '') console.log(`      stderr:\n${indent(run.stderr)}`);
}

async function main() {
  console.log(`mcp-interop: ${new Date().toISOString()}, node ${process.version} for our side`);
  console.log(`  tools: ${INSPECTOR}, ${CONFORMANCE} on ${NODE}; output in ${out}`);
  try {
    const version = execFileSync('npx', ['-y', '-p', NODE, 'node', '--version'], {
      cwd: out,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    console.log(`  their node: ${version}`);
  } catch {
    console.log('  their node: unknown (npx -p node@22 node --version failed)');
  }

  // ---- the server and two boards ----
  const apiToken = randomBytes(12).toString('hex');
  const serve = background(['serve', '--port', '0', '--api-token', apiToken]);
  await until(() => /^API\s+\S+/m.test(serve.io.stdout), 'the server');
  const ota = /^OTA\s+(\S+)/m.exec(serve.io.stdout)?.[1] ?? '';
  const api = /^API\s+(\S+)/m.exec(serve.io.stdout)?.[1] ?? '';
  const server = api.replace(/\/api$/, '');
  background(['sim', '--ota-url', ota, '--board', 'bread-compact-wifi']);
  background(['sim', '--ota-url', ota, '--board', 'otto-robot']);
  await until(() => (serve.io.stdout.match(/^ready /gm) ?? []).length >= 2, 'two ready boards');
  const ready = serve.io.stdout.match(/^ready .*$/gm) ?? [];
  console.log(`  server ${server}; ${ready.join('; ')}`);
  const bread = /^ready (\S+) bread-compact-wifi/m.exec(serve.io.stdout)?.[1] ?? '';
  const breadPrefix = bread.replaceAll(':', '');
  const volume = `${breadPrefix}__self-audio_speaker-set_volume`;
  const bridgeArgs = ['bridge', '--server', server, '--token', apiToken];

  // ---- the Inspector over stdio: it starts `xiaozhi-mcp bridge` itself ----
  console.log('\nMCP Inspector CLI over stdio (node apps/cli/bin/xiaozhi-mcp.js bridge ...)');
  const stdio = [process.execPath, cli, ...bridgeArgs, '--'];
  await inspector('inspector stdio tools/list', stdio, ['--method', 'tools/list'], (run, body) => {
    const names = (body?.tools ?? []).map((t) => t.name);
    const boards = new Set(names.map((n) => n.split('__')[0]));
    return {
      ok: run.code === 0 && names.includes(volume) && boards.size === 2,
      note: `${names.length} tools of ${boards.size} boards`,
    };
  });
  await inspector(
    'inspector stdio tools/call set_volume volume=30',
    stdio,
    ['--method', 'tools/call', '--tool-name', volume, '--tool-arg', 'volume=30'],
    (run, body) => ({
      ok: run.code === 0 && body?.isError === false && body?.content?.[0]?.text === 'true',
      note: `isError ${body?.isError}, content ${JSON.stringify(body?.content)}`,
    }),
  );
  await inspector(
    "inspector stdio tools/call set_volume volume=300 (the board's own error)",
    stdio,
    ['--method', 'tools/call', '--tool-name', volume, '--tool-arg', 'volume=300'],
    (_run, body) => ({
      ok:
        body?.isError === true && body?.content?.[0]?.text === 'Value exceeds maximum allowed: 100',
      note: `isError ${body?.isError}, content ${JSON.stringify(body?.content)}`,
    }),
  );
  const pinned = [process.execPath, cli, ...bridgeArgs, '--device', bread, '--'];
  await inspector(
    'inspector stdio --device tools/list (unprefixed names)',
    pinned,
    ['--method', 'tools/list'],
    (run, body) => {
      const names = (body?.tools ?? []).map((t) => t.name);
      return {
        ok: run.code === 0 && names.includes('self-audio_speaker-set_volume'),
        note: `${names.length} tools`,
      };
    },
  );

  // ---- the Inspector over Streamable HTTP ----
  const httpToken = randomBytes(12).toString('hex');
  const http = background([...bridgeArgs, '--http', '127.0.0.1:0', '--http-token', httpToken]);
  await until(() => http.io.stdout.includes('\n'), 'the HTTP bridge');
  const url = http.io.stdout.trim();
  console.log(`\nMCP Inspector CLI over Streamable HTTP (${url}, bearer token)`);
  const auth = ['--header', `Authorization: Bearer ${httpToken}`];
  await inspector(
    'inspector http tools/list',
    [url, '--transport', 'http', ...auth],
    ['--method', 'tools/list'],
    (run, body) => {
      const names = (body?.tools ?? []).map((t) => t.name);
      return { ok: run.code === 0 && names.includes(volume), note: `${names.length} tools` };
    },
  );
  await inspector(
    'inspector http tools/call set_volume volume=55',
    [url, '--transport', 'http', ...auth],
    ['--method', 'tools/call', '--tool-name', volume, '--tool-arg', 'volume=55'],
    (run, body) => ({
      ok: run.code === 0 && body?.isError === false,
      note: `isError ${body?.isError}, content ${JSON.stringify(body?.content)}`,
    }),
  );
  await inspector(
    'inspector http without the token is refused',
    [url, '--transport', 'http'],
    ['--method', 'tools/list', '--stored-auth-only'],
    (run) => ({ ok: run.code !== 0, note: 'refused as expected' }),
  );

  // ---- the conformance suite's server scenarios over Streamable HTTP ----
  // No bearer token: the suite sends none. Loopback only, as the bridge asks of an open endpoint.
  const open = background([...bridgeArgs, '--http', '127.0.0.1:0']);
  await until(() => open.io.stdout.includes('\n'), 'the open HTTP bridge');
  const openUrl = open.io.stdout.trim();
  console.log(`\nconformance server --suite all --url ${openUrl}`);
  const conformanceDir = join(out, 'conformance');
  const suite = await npx(CONFORMANCE, 'conformance', [
    'server',
    '--url',
    openUrl,
    '--suite',
    'all',
    '-o',
    conformanceDir,
  ]);
  const summary = suite.stdout.slice(suite.stdout.indexOf('=== SUMMARY ==='));
  console.log(indent(summary === '' ? suite.stdout : summary));
  if (suite.stderr.trim() !== '') console.log(`      stderr:\n${indent(suite.stderr)}`);
  const dirs = existsSync(conformanceDir) ? readdirSync(conformanceDir).sort() : [];
  if (dirs.length === 0) record('conformance', false, `no results (exit ${suite.code})`);
  for (const dir of dirs) {
    const scenario = dir.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T.*$/, '');
    const checks = parseJson(readFileSync(join(conformanceDir, dir, 'checks.json'), 'utf8')) ?? [];
    const failed = checks.filter((c) => c.status === 'FAILURE');
    const warned = checks.filter((c) => c.status === 'WARNING');
    const passed = checks.filter((c) => c.status === 'SUCCESS');
    const why = [...failed, ...warned]
      .map((c) => `${c.status} ${c.id}: ${short(c.errorMessage ?? c.description)}`)
      .join(' | ');
    const counts = `${passed.length} passed, ${failed.length} failed, ${warned.length} warnings`;
    if (NEEDS_REFERENCE_SERVER.test(scenario) && failed.length > 0) {
      console.log(`n/a   conformance ${scenario}: ${counts} (needs the reference server): ${why}`);
      continue;
    }
    record(
      `conformance ${scenario}`,
      failed.length === 0,
      `${counts}${why === '' ? '' : `: ${why}`}`,
    );
  }

  const failures = results.filter((r) => !r.ok);
  console.log(
    `\nmcp-interop: ${results.length - failures.length} of ${results.length} passed${failures.length === 0 ? '' : `; failed: ${failures.map((f) => f.step).join(', ')}`}`,
  );
  return failures.length === 0 ? 0 : 1;
}

let code = 1;
try {
  code = await main();
} catch (error) {
  console.error(`mcp-interop: ${error instanceof Error ? error.message : String(error)}`);
} finally {
  for (const child of children.reverse()) if (child.exitCode === null) child.kill('SIGTERM');
}
process.exitCode = code;
