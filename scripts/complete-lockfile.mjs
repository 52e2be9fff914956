#!/usr/bin/env node
// @ts-check
// Checks that package-lock.json is complete for every platform, and completes it from the
// registry's own metadata when it is not. Run by hand, never by an install hook:
//
//   npm run lockfile:check      (node scripts/complete-lockfile.mjs --check)  offline; .ci/run runs
//                               it before `npm ci`. Exit 1 when the lock is incomplete.
//   npm run lockfile:complete   (node scripts/complete-lockfile.mjs)  adds what is missing.
//
// Why: a native tool (biome, turbo, rollup, esbuild) ships one optional package per platform.
// npm writes into the lock only the optional packages the registry can serve; one it cannot
// find is left out without a word, and `npm ci` then refuses the lock on every machine
// ("Missing: @biomejs/cli-darwin-arm64@ from lock file"). The registry mirror this project
// installs from lags behind for other platforms' binaries, so the cure is to pin such tools to a
// release the registry has for every platform (see "Development" in README.md); then npm itself
// writes a complete lock, with `integrity` for every entry, and this script has nothing to add.
//
// "Complete" means: every optional dependency of every locked package resolves, the way node
// resolves it, to a lock entry of the required version, and every entry fetched from a registry
// carries `integrity`. Completing adds each missing optional package with `version`, `resolved`,
// `integrity`, `os`, `cpu`, `libc`, `engines` and `license` as `npm view NAME@VERSION --json`
// gives them (nothing is guessed from names); a version the registry does not have is reported
// and the lock is left untouched, since an entry without `integrity` cannot be verified.
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * @typedef {{
 *   version?: string, resolved?: string, integrity?: string, link?: boolean,
 *   dev?: boolean, devOptional?: boolean, optional?: boolean,
 *   optionalDependencies?: Record<string, string>,
 *   os?: string[], cpu?: string[], libc?: string[],
 *   engines?: Record<string, string>, license?: string,
 * }} LockEntry
 */

const check = process.argv.includes('--check');
const lockPath = resolve(dirname(fileURLToPath(import.meta.url)), '../package-lock.json');
/** @type {{ packages: Record<string, LockEntry> }} */
const lock = JSON.parse(readFileSync(lockPath, 'utf8'));
const packages = lock.packages;

const EXACT = /^\d+\.\d+\.\d+(-[\w.]+)?$/;

/** Where node finds `name` from the package at `from`: nested first, then each parent. */
function lookup(/** @type {string} */ from, /** @type {string} */ name) {
  let base = from;
  for (;;) {
    const path = `${base ? `${base}/` : ''}node_modules/${name}`;
    if (packages[path]) return path;
    if (!base) return undefined;
    const cut = base.lastIndexOf('/node_modules/');
    base = cut === -1 ? '' : base.slice(0, cut);
  }
}

/** @type {{ from: string, name: string, spec: string, found: string | undefined }[]} */
const missing = [];
/** @type {string[]} */
const unverified = [];
for (const [path, entry] of Object.entries(packages)) {
  const fromRegistry =
    path.includes('node_modules/') &&
    !entry.link &&
    (entry.resolved === undefined || /^https?:/.test(entry.resolved));
  if (fromRegistry && !entry.integrity) unverified.push(path);
  for (const [name, spec] of Object.entries(entry.optionalDependencies ?? {})) {
    const found = lookup(path, name);
    // Only exact versions are compared: ranges are npm's business, and its lock satisfies them.
    if (found && !(EXACT.test(spec) && packages[found]?.version !== spec)) continue;
    missing.push({ from: path, name, spec, found: found && packages[found]?.version });
  }
}

const where = (/** @type {string} */ from) => (from === '' ? 'the root' : from);
if (check) {
  for (const m of missing) {
    console.error(
      `lockfile: ${m.name}@${m.spec} (optional dependency of ${where(m.from)}) is not in package-lock.json${m.found ? ` (only ${m.found})` : ''}`,
    );
  }
  for (const path of unverified) console.error(`lockfile: ${path} has no integrity`);
  if (missing.length + unverified.length > 0) {
    console.error(
      'lockfile: incomplete: `npm ci` would refuse it, or install what it cannot verify.\n' +
        'lockfile: run `npm run lockfile:complete`; when the registry lacks a platform package,\n' +
        'lockfile: pin its tool to a release the registry has for every platform (README.md, Development).',
    );
    process.exit(1);
  }
  console.error(
    `lockfile: complete (${Object.keys(packages).length - 1} entries, every optional platform package locked with integrity)`,
  );
  process.exit(0);
}

/** The registry's metadata for name@spec (the highest match of a range), or undefined. */
function view(/** @type {string} */ name, /** @type {string} */ spec) {
  try {
    const out = execFileSync('npm', ['view', `${name}@${spec}`, '--json'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const data = out.trim() ? JSON.parse(out) : undefined;
    return Array.isArray(data) ? data.at(-1) : data;
  } catch {
    return undefined;
  }
}

/** @type {string[]} */
const unavailable = [];
let added = 0;
for (const { from, name, spec, found } of missing) {
  const meta = view(name, spec);
  if (!meta?.version || !meta.dist?.integrity || !meta.dist?.tarball) {
    unavailable.push(`${name}@${spec} (optional dependency of ${where(from)})`);
    continue;
  }
  const parent = packages[from] ?? {};
  // Hoisted when the top level is free, else nested under the package that needs it.
  const path =
    found === undefined && !packages[`node_modules/${name}`]
      ? `node_modules/${name}`
      : `${from ? `${from}/` : ''}node_modules/${name}`;
  packages[path] = {
    version: meta.version,
    resolved: meta.dist.tarball,
    integrity: meta.dist.integrity,
    ...(meta.cpu ? { cpu: meta.cpu } : {}),
    ...(parent.dev || parent.devOptional ? { dev: true } : {}),
    ...(meta.libc ? { libc: meta.libc } : {}),
    ...(meta.license ? { license: meta.license } : {}),
    optional: true,
    ...(meta.os ? { os: meta.os } : {}),
    ...(meta.engines ? { engines: meta.engines } : {}),
  };
  added++;
  console.error(`lockfile: added ${path} ${meta.version}`);
}
if (unavailable.length > 0) {
  for (const u of unavailable) console.error(`lockfile: the registry has no ${u}`);
  console.error(
    'lockfile: nothing written. Pin the tool that needs it to a release the registry has for every\n' +
      'lockfile: platform (README.md, Development), then `npm install` and `npm run lockfile:check`.',
  );
  process.exit(1);
}
for (const path of unverified) console.error(`lockfile: ${path} has no integrity (npm install)`);
if (added > 0) {
  lock.packages = Object.fromEntries(
    Object.entries(packages).sort(([a], [b]) => a.localeCompare(b, 'en')),
  );
  writeFileSync(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
}
console.error(`lockfile: ${added} entr${added === 1 ? 'y' : 'ies'} added`);
process.exit(unverified.length > 0 ? 1 : 0);
