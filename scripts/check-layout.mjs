#!/usr/bin/env node
// @ts-check
// Holds the layout of docs/architecture.md to the tree: every path its Layout block names exists,
// and every source folder of a workspace (src/ and the folders under it, bench/, fuzz/) is named
// there, so a newcomer's map never shows a folder that is gone or hides one that is new. Part of
// `npm run docs:check`; prints each mismatch and exits 1, or one line and 0.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const DOC = 'docs/architecture.md';
/** Folders that hold data or outputs, not source: not required in the layout. */
const NOT_SOURCE = new Set(['node_modules', 'dist', '.turbo', 'coverage', 'fixtures']);

/**
 * The paths the Layout block names, from its indentation: `packages/` then `  protocol/` is
 * `packages/protocol/`. Each line is a name (a folder when it ends in `/`), then its description.
 * @param {string} text the document
 * @returns {{ path: string, line: number }[]}
 */
export function layoutPaths(text) {
  const lines = text.split('\n');
  const heading = lines.findIndex((l) => /^##\s+Layout\s*$/.test(l));
  if (heading === -1) throw new Error(`${DOC}: no "## Layout" section`);
  const open = lines.findIndex((l, i) => i > heading && /^```/.test(l));
  const close = lines.findIndex((l, i) => i > open && /^```/.test(l));
  /** @type {{ indent: number, path: string }[]} */
  const stack = [];
  const out = [];
  for (let i = open + 1; i < close; i++) {
    const match = /^( *)(\S+)/.exec(lines[i] ?? '');
    if (!match) continue;
    const indent = match[1]?.length ?? 0;
    const name = match[2] ?? '';
    while (stack.length > 0 && (stack.at(-1)?.indent ?? 0) >= indent) stack.pop();
    const folder = name.endsWith('/');
    const path = posix.join(stack.at(-1)?.path ?? '', folder ? name.slice(0, -1) : name);
    out.push({ path: folder ? `${path}/` : path, line: i + 1 });
    if (folder) stack.push({ indent, path });
  }
  return out;
}

/** @returns {string[]} every source folder of every workspace, as `dir/` */
function sourceFolders() {
  const workspaces = ['packages', 'apps']
    .flatMap((parent) =>
      readdirSync(join(root, parent), { withFileTypes: true })
        .filter((e) => e.isDirectory() && existsSync(join(root, parent, e.name, 'package.json')))
        .map((e) => `${parent}/${e.name}`),
    )
    .concat(existsSync(join(root, 'hil/package.json')) ? ['hil'] : []);
  /** @type {string[]} */
  const out = [];
  /** @param {string} dir */
  const walk = (dir) => {
    out.push(`${dir}/`);
    for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
      if (entry.isDirectory() && !NOT_SOURCE.has(entry.name)) walk(`${dir}/${entry.name}`);
    }
  };
  for (const workspace of workspaces) {
    for (const top of ['src', 'bench', 'fuzz']) {
      if (existsSync(join(root, workspace, top))) walk(`${workspace}/${top}`);
    }
  }
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const named = layoutPaths(readFileSync(join(root, DOC), 'utf8'));
  const problems = [];
  for (const { path, line } of named) {
    if (!existsSync(join(root, path)))
      problems.push(`${DOC}:${line}: ${path}: no such file or folder`);
  }
  const listed = new Set(named.map((n) => n.path));
  for (const folder of sourceFolders()) {
    if (!listed.has(folder))
      problems.push(`${DOC}: Layout does not name the source folder ${folder}`);
  }
  if (problems.length > 0) {
    for (const problem of problems) process.stderr.write(`${problem}\n`);
    process.stderr.write(
      `docs:check: the layout of ${DOC} and the tree differ in ${problems.length} place(s)\n`,
    );
    process.exit(1);
  }
  process.stdout.write(
    `docs:check: the layout of ${DOC} names ${named.length} paths, all there, and every source folder\n`,
  );
}
