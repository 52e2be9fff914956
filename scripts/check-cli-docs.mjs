#!/usr/bin/env node
// @ts-check
// Holds README.md to the `xiaozhi-mcp` program it documents, read from the program itself (the
// built apps/cli, as `npm ci` leaves it), not from a list kept here:
//   - the command table of "The CLI": a row for every command, whose first cell names each of its
//     options; no row for a command or an option the program does not have;
//   - the MACs of the examples (`--device MAC`, tool names `<mac>__...`): each is a board that a
//     `xiaozhi-mcp sim` command of the README starts, as the program derives its MACs.
// Part of `npm run docs:check`; prints each problem and exits 1, or one line and 0.
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const README = 'README.md';
const CLI_DIST = join(root, 'apps/cli/dist');

/**
 * @typedef {import('commander').Command} Command
 * @typedef {{ path: string, options: Map<string, { defaultValue: unknown }> }} Documented
 */

/**
 * Every command a user runs: one without subcommands, or one with options or arguments of its
 * own (`devices` beside `devices forget`); `image` and `port` only group theirs.
 * @param {Command} program
 * @returns {Map<string, Documented>}
 */
export function programCommands(program) {
  /** @type {Map<string, Documented>} */
  const out = new Map();
  /** @param {Command} command @param {string} prefix */
  const walk = (command, prefix) => {
    for (const sub of command.commands) {
      const path = `${prefix}${sub.name()}`;
      const own = sub.options.length > 0 || sub.registeredArguments.length > 0;
      if (sub.commands.length === 0 || own) {
        const options = new Map();
        for (const option of sub.options) {
          // A hidden option is an old spelling the help does not show either.
          if (!option.hidden && option.long !== undefined)
            options.set(option.long, { defaultValue: option.defaultValue });
        }
        out.set(path, { path, options });
      }
      walk(sub, `${path} `);
    }
  };
  walk(program, '');
  return out;
}

/**
 * The cells of a markdown table row (`\|` is a `|` inside a cell).
 * @param {string} line
 */
function cells(line) {
  return line
    .trim()
    .replace(/^\||\|$/g, '')
    .split(/(?<!\\)\|/)
    .map((cell) => cell.trim());
}

/**
 * The rows of the README's command table: the first cell's command line, where it is.
 * @param {string} text
 * @returns {{ line: number, words: string[], options: string[] }[]}
 */
export function tableRows(text) {
  const rows = [];
  const lines = text.split('\n');
  for (const [index, line] of lines.entries()) {
    if (!line.startsWith('|')) continue;
    const first = cells(line)[0] ?? '';
    const code = /^`xiaozhi-mcp ([^`]*)`$/.exec(first);
    if (code?.[1] === undefined) continue;
    const synopsis = code[1].replace(/\\\|/g, '|');
    rows.push({
      line: index + 1,
      words: synopsis.split(/\s+/).filter(Boolean),
      options: [...new Set(synopsis.match(/--[a-z][\w-]*/g) ?? [])],
    });
  }
  return rows;
}

/**
 * The `xiaozhi-mcp sim` command lines of the README's code blocks, with their options.
 * @param {string} text
 */
export function simCommands(text) {
  const out = [];
  let fence = false;
  for (const [index, line] of text.split('\n').entries()) {
    if (/^\s*```/.test(line)) {
      fence = !fence;
      continue;
    }
    if (!fence) continue;
    const at = line.indexOf('xiaozhi-mcp sim ');
    if (at === -1) continue;
    const words = line.slice(at).replace(/#.*$/, '').split(/\s+/).filter(Boolean);
    /** @type {Record<string, string>} */
    const options = {};
    for (const [i, word] of words.entries()) {
      const next = words[i + 1];
      if (word.startsWith('--') && next !== undefined && !next.startsWith('--'))
        options[word] = next;
    }
    out.push({ line: index + 1, options });
  }
  return out;
}

/**
 * The MACs the README's examples name: `--device MAC` (also as JSON arguments), tool names
 * `<mac>__...` and a MAC on a sim command's line, as `aa:bb:cc:dd:ee:ff`.
 * @param {string} text
 */
export function exampleMacs(text) {
  const out = [];
  const hex = '[0-9a-f]{2}';
  const colon = new RegExp(`--device"?,?\\s*"?(${hex}(?::${hex}){5})`, 'gi');
  const bare = /\b([0-9a-f]{12})__/gi;
  const any = new RegExp(`\\b(${hex}(?::${hex}){5})\\b`, 'gi');
  for (const [index, line] of text.split('\n').entries()) {
    // A sim command's line may say which MAC its board gets.
    if (line.includes('xiaozhi-mcp sim '))
      for (const match of line.matchAll(any))
        out.push({ line: index + 1, mac: (match[1] ?? '').toLowerCase() });
    for (const match of line.matchAll(colon))
      out.push({ line: index + 1, mac: (match[1] ?? '').toLowerCase() });
    for (const match of line.matchAll(bare)) {
      const mac = (match[1] ?? '').toLowerCase().match(/../g)?.join(':') ?? '';
      out.push({ line: index + 1, mac });
    }
  }
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const built = join(CLI_DIST, 'program.js');
  if (!existsSync(built)) {
    process.stderr.write(
      `docs:check: ${built} is missing: build the CLI first (npm run build -w @xiaozhi-mcp/cli)\n`,
    );
    process.exit(1);
  }
  /** @type {{ createProgram: (io: unknown, setExit: (code: number) => void) => Command }} */
  const cli = await import(pathToFileURL(built).href);
  /** @type {{ simMac: (preset: string, index: number, first?: string) => string }} */
  const sim = await import(pathToFileURL(join(CLI_DIST, 'commands/sim.js')).href);
  const program = cli.createProgram({ stdout() {}, stderr() {} }, () => {});
  const commands = programCommands(program);
  const text = readFileSync(join(root, README), 'utf8');
  const problems = [];

  const seen = new Set();
  for (const row of tableRows(text)) {
    // The longest run of leading words that is a command: `devices forget DEVICE` is `devices
    // forget`, `devices [--server URL]` is `devices`.
    let path;
    for (let n = row.words.length; n > 0 && path === undefined; n--) {
      const candidate = row.words.slice(0, n).join(' ');
      if (commands.has(candidate)) path = candidate;
    }
    const command = path === undefined ? undefined : commands.get(path);
    if (path === undefined || command === undefined) {
      problems.push(`${README}:${row.line}: xiaozhi-mcp ${row.words[0]}: no such command`);
      continue;
    }
    seen.add(path);
    for (const option of command.options.keys()) {
      if (!row.options.includes(option))
        problems.push(`${README}:${row.line}: xiaozhi-mcp ${path}: ${option} is not named`);
    }
    for (const option of row.options) {
      if (!command.options.has(option))
        problems.push(`${README}:${row.line}: xiaozhi-mcp ${path} has no option ${option}`);
    }
  }
  for (const path of commands.keys()) {
    if (!seen.has(path))
      problems.push(`${README}: the command table has no row for xiaozhi-mcp ${path}`);
  }

  const simOptions = commands.get('sim')?.options;
  const defaultBoard = String(simOptions?.get('--board')?.defaultValue ?? '');
  /** @type {Set<string>} */
  const boards = new Set();
  for (const { options } of simCommands(text)) {
    const count = Number(options['--count'] ?? '1');
    for (let i = 0; i < count; i++)
      boards.add(sim.simMac(options['--board'] ?? defaultBoard, i, options['--first-mac']));
  }
  for (const { line, mac } of exampleMacs(text)) {
    if (!boards.has(mac))
      problems.push(
        `${README}:${line}: ${mac} is no board the README's sim starts (${[...boards].join(', ') || 'none'})`,
      );
  }

  if (problems.length > 0) {
    for (const problem of problems) process.stderr.write(`${problem}\n`);
    process.stderr.write(
      `docs:check: ${README} and the xiaozhi-mcp program differ in ${problems.length} place(s)\n`,
    );
    process.exit(1);
  }
  process.stdout.write(
    `docs:check: ${README}'s command table names the ${commands.size} commands of xiaozhi-mcp and their options; its examples name the boards its sim starts\n`,
  );
}
