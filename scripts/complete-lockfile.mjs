#!/usr/bin/env node
// The registry this project installs from serves only the current platform's native
// binaries for recent releases (rollup, esbuild, biome, turbo), so npm leaves the other
// platforms' optional packages out of package-lock.json, and `npm ci` then refuses the lock
// as out of sync. This adds each missing optional package as a lock entry tagged with its
// os/cpu/libc, which `npm ci` accepts and skips on every other platform. Idempotent; run it
// after changing dependencies (npm install runs it through the root postinstall).
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const lockPath = resolve(dirname(fileURLToPath(import.meta.url)), '../package-lock.json');
const lock = JSON.parse(readFileSync(lockPath, 'utf8'));
const packages = lock.packages;

const OS = [
  'android',
  'darwin',
  'freebsd',
  'linux',
  'netbsd',
  'openbsd',
  'openharmony',
  'sunos',
  'win32',
  'aix',
];
const CPU = {
  x64: 'x64',
  arm64: 'arm64',
  arm: 'arm',
  ia32: 'ia32',
  loong64: 'loong64',
  ppc64: 'ppc64',
  riscv64: 'riscv64',
  s390x: 's390x',
  mips64el: 'mips64el',
  64: 'x64',
};

function platformOf(name) {
  const parts = name.split('/').pop().split('-');
  const os = parts.find((p) => OS.includes(p)) ?? (parts.includes('windows') ? 'win32' : undefined);
  const cpu = parts.map((p) => CPU[p]).find(Boolean);
  const libc = parts.includes('musl')
    ? 'musl'
    : parts.includes('gnu') || parts.includes('gnueabihf')
      ? 'glibc'
      : undefined;
  return { os, cpu, libc };
}

// Where node would find `name` from the package at `from`: nested first, then each parent.
function resolves(from, name) {
  let base = from;
  for (;;) {
    if (packages[`${base ? `${base}/` : ''}node_modules/${name}`]) return true;
    if (!base) return false;
    const cut = base.lastIndexOf('/node_modules/');
    base = cut === -1 ? '' : base.slice(0, cut);
  }
}

let added = 0;
for (const [path, entry] of Object.entries(packages)) {
  for (const [name, spec] of Object.entries(entry.optionalDependencies ?? {})) {
    if (resolves(path, name) || !/^\d+\.\d+\.\d+(-[\w.]+)?$/.test(spec)) continue;
    const { os, cpu, libc } = platformOf(name);
    if (os === undefined || cpu === undefined) continue; // not a platform binary: leave it to npm
    packages[`node_modules/${name}`] = {
      version: spec,
      ...(entry.dev ? { dev: true } : {}),
      optional: true,
      os: [os],
      cpu: [cpu],
      ...(libc ? { libc: [libc] } : {}),
    };
    added++;
  }
}
lock.packages = Object.fromEntries(
  Object.entries(packages).sort(([a], [b]) => a.localeCompare(b, 'en')),
);
if (added > 0) writeFileSync(lockPath, `${JSON.stringify(lock, null, 2)}\n`);
console.error(`complete-lockfile: ${added} platform entr${added === 1 ? 'y' : 'ies'} added`);
