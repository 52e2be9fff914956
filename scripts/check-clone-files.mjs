#!/usr/bin/env node
// @ts-check
// The files the docs have a user put in the clone must not break `npm test`: lint (biome) checks
// every file it does not ignore, so a `hil.config.json` or `far.json` written as the docs show it,
// or the reports of a run, would fail it. Reads the names from the docs (README.md, docs/): the
// inventories (`hil.config.json`, each `--config X.json`) and the outputs (each `--out X` and
// `--out`'s defaults), writes each one, unformatted, into a scratch copy of the repository's
// biome.json and .gitignore (in the clone's root and in hil/, where `npx hil` also runs), and
// runs the repository's biome there: only a control file may be reported. Outputs, and the
// inventories loose in the clone, must be git-ignored too; an inventory in a folder of its own
// (docs/ci.md's `rigs/<rig>.json`) is the rig's to commit. Part of `npm run docs:check`; prints
// each problem and exits 1, or one line and 0.
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, posix, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** Written into each file: valid JSON that biome would reformat. */
const UNFORMATTED = '{"boards":[{"name":"desk","port":"virtual:desk"}]}\n';
const CONTROL = 'control.json';

/** @returns {string[]} the docs a user follows */
function docs() {
  return execFileSync('git', ['ls-files', '-z', 'README.md', 'docs'], {
    cwd: root,
    encoding: 'utf8',
  })
    .split('\0')
    .filter((path) => /\.(md|ya?ml)$/.test(path));
}

/**
 * The inventories and outputs a text names. Placeholders (`FILE`, `DIR`, `...`) and absolute paths
 * are not files in the clone; `<rig>` (and the workflow's `${{ matrix.rig }}`) is a rig's name.
 * @param {string} text
 */
export function namedFiles(text) {
  const plain = text.replace(/\$\{\{\s*matrix\.rig\s*\}\}/g, '<rig>');
  // `{out}` is the load harness's placeholder for a folder per run (scripts/stress.mjs).
  const concrete = (/** @type {string} */ value) =>
    !/^[A-Z.]+$/.test(value) &&
    !value.startsWith('/') &&
    !value.startsWith('$') &&
    !value.includes('{');
  const name = (/** @type {string} */ value) =>
    posix.normalize(value.replace(/<rig>/g, 'lab-1').replace(/\/$/, ''));
  /** @type {Set<string>} */
  const inventories = new Set();
  /** @type {Set<string>} */
  const outputs = new Set();
  if (/(?<![\w/.-])(?:\.\/)?hil\.config\.json\b/.test(plain)) inventories.add('hil.config.json');
  for (const match of plain.matchAll(/--config\s+["']?([^\s"'`|)\]]+\.json)\b/g)) {
    const value = match[1] ?? '';
    if (concrete(value)) inventories.add(name(value));
  }
  for (const match of plain.matchAll(/--out\s+["']?([^\s"'`|)\]]+)/g)) {
    const value = match[1] ?? '';
    if (concrete(value)) outputs.add(name(value));
  }
  for (const match of plain.matchAll(/--out\b[^\n]*?\(default `([^`]+)`\)/g)) {
    outputs.add(name(match[1] ?? ''));
  }
  return { inventories, outputs };
}

/**
 * Runs the repository's biome and git on a scratch tree holding `files`.
 * @param {{ path: string, gitIgnored: boolean }[]} files
 * @returns {string[]} the problems
 */
export function checkTree(files) {
  const problems = [];
  const scratch = mkdtempSync(join(tmpdir(), 'clone-files-'));
  try {
    copyFileSync(join(root, 'biome.json'), join(scratch, 'biome.json'));
    copyFileSync(join(root, '.gitignore'), join(scratch, '.gitignore'));
    execFileSync('git', ['init', '-q'], { cwd: scratch });
    for (const { path } of [{ path: CONTROL }, ...files]) {
      mkdirSync(dirname(join(scratch, path)), { recursive: true });
      writeFileSync(join(scratch, path), UNFORMATTED);
    }
    const biome = join(
      root,
      'node_modules',
      '.bin',
      process.platform === 'win32' ? 'biome.cmd' : 'biome',
    );
    const run = spawnSync(biome, ['check', '--reporter=json', '.'], {
      cwd: scratch,
      encoding: 'utf8',
      shell: process.platform === 'win32',
    });
    /** @type {{ diagnostics?: { location?: { path?: string } }[] }} */
    let report = {};
    try {
      report = JSON.parse(run.stdout);
    } catch {
      return [`biome gave no report (${run.stderr.trim() || `exit ${run.status}`})`];
    }
    const reported = new Set(
      (report.diagnostics ?? []).map((d) => (d.location?.path ?? '').split('\\').join('/')),
    );
    // Without this, a biome that checked nothing would pass every file.
    if (!reported.has(CONTROL)) problems.push(`biome did not check the scratch tree (${CONTROL})`);
    for (const { path } of files) {
      if (reported.has(path)) problems.push(`${path}: biome checks it, so lint fails on it`);
    }
    const wanted = files.filter((f) => f.gitIgnored).map((f) => f.path);
    const ignored = new Set(
      spawnSync('git', ['check-ignore', '--no-index', ...wanted], {
        cwd: scratch,
        encoding: 'utf8',
      })
        .stdout.split('\n')
        .filter(Boolean),
    );
    for (const path of wanted) {
      if (!ignored.has(path)) problems.push(`${path}: not in .gitignore`);
    }
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
  return problems;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  /** @type {Map<string, { path: string, gitIgnored: boolean }>} */
  const files = new Map();
  // An inventory the repository itself keeps (scripts/stress/) is linted like any source file.
  const committed = new Set(
    execFileSync('git', ['ls-files', '-z'], { cwd: root, encoding: 'utf8' }).split('\0'),
  );
  for (const doc of docs()) {
    const { inventories, outputs } = namedFiles(readFileSync(join(root, doc), 'utf8'));
    for (const base of ['', 'hil/']) {
      for (const inventory of inventories) {
        if (committed.has(inventory)) continue;
        const path = `${base}${inventory}`;
        files.set(path, { path, gitIgnored: !inventory.includes('/') });
      }
      for (const output of outputs) {
        // `--out X.json` is a file (a replica), any other `--out` a folder of reports.
        const path = output.endsWith('.json') ? `${base}${output}` : `${base}${output}/report.json`;
        files.set(path, { path, gitIgnored: true });
      }
    }
  }
  const problems = files.size === 0 ? ['the docs name no inventory or output'] : [];
  problems.push(...checkTree([...files.values()]));
  if (problems.length > 0) {
    for (const problem of problems) process.stderr.write(`${problem}\n`);
    process.stderr.write(
      `docs:check: ${problems.length} file(s) the docs have a user make would fail npm test or be committed\n`,
    );
    process.exit(1);
  }
  process.stdout.write(
    `docs:check: the ${files.size} inventories and outputs the docs name are ignored by lint (and by git where they are not the rig's to commit)\n`,
  );
}
