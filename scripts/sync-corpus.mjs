#!/usr/bin/env node
// Copies ../shared/corpus (the golden corpus recorded from the firmware) into
// fixtures/corpus, so a clone without ../shared/ still has it. `--check` only
// reports whether the copy is identical and exits 1 when it is stale.
import { createHash } from 'node:crypto';
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const source = resolve(root, '../shared/corpus');
const target = resolve(root, 'fixtures/corpus');

function listFiles(dir) {
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...listFiles(path));
    else out.push(path);
  }
  return out;
}

function digest(dir) {
  const files = new Map();
  for (const file of listFiles(dir)) {
    files.set(relative(dir, file), createHash('sha256').update(readFileSync(file)).digest('hex'));
  }
  return files;
}

if (!existsSync(source)) {
  console.error(`corpus:sync: no corpus at ${source}; nothing to sync`);
  process.exit(process.argv.includes('--check') ? 0 : 1);
}

if (process.argv.includes('--check')) {
  const want = digest(source);
  const have = existsSync(target) ? digest(target) : new Map();
  const stale = [...new Set([...want.keys(), ...have.keys()])].filter(
    (file) => want.get(file) !== have.get(file),
  );
  if (stale.length > 0) {
    console.error(
      `corpus:sync: fixtures/corpus is stale: ${stale.join(', ')}; run npm run corpus:sync`,
    );
    process.exit(1);
  }
  console.log(`corpus:sync: fixtures/corpus matches ${source} (${want.size} files)`);
} else {
  rmSync(target, { recursive: true, force: true });
  cpSync(source, target, { recursive: true });
  console.log(`corpus:sync: copied ${listFiles(target).length} files into fixtures/corpus`);
}
