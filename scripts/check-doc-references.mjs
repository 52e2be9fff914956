#!/usr/bin/env node
// @ts-check
// Fails when a citation of the reference documents does not resolve inside the repository.
// Scans the tracked text files (`git ls-files`, without fixtures/ and package-lock.json) for:
//   - citations of the documents that lived outside the repository (the upper-case PROTOCOL,
//     ARCHITECTURE and HIL markdown files): each one is broken in a fresh clone;
//   - `docs/<file>.md` citations, optionally with sections (`§3.2`, `§9a`, `§3.3, §3.4`,
//     `§4-§6`) or an anchor (`#exit-codes`): the file must exist, and so must each section (a
//     heading that starts with its number, or an `<a id="s3.2">` anchor) or the anchor (an
//     `<a id>` or a heading's GitHub anchor);
//   - in markdown files, relative links to markdown files and to anchors (`[x](hil.md#suites)`).
// Prints every broken citation as `file:line: reason` and exits 1; exits 0 when all resolve.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, posix, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/** A section number: `3`, `3.2`, `9a`, `10.8`. */
const SECTION = String.raw`\d+[a-z]?(?:\.\d+)*`;
/** Citations of the documents that lived outside the repository, with the number after one. */
const LEGACY =
  /\b(PROTOCOL|ARCHITECTURE|HIL)\.md\b(?:'s)?(?:\s+(?:section\s+)?(\d+[a-z]?(?:\.\d+)*))?/g;
/** `docs/<file>.md`, then `#anchor` or `§N` sections joined by `,`, `and`, `-` or `–`. */
const DOCS_REFERENCE = new RegExp(
  String.raw`(?<![\w./-])docs/([\w.-]+(?:/[\w.-]+)*\.md)(?:#([\w.~-]*[\w~-])|\s?§\s?(${SECTION})((?:\s*(?:,|and|-|–)\s*§\s?${SECTION})*))?`,
  'g',
);
const MORE_SECTIONS = new RegExp(String.raw`§\s?(${SECTION})`, 'g');
/** A markdown link or image target: `](target)` or `](target "title")`. */
const MARKDOWN_LINK = /\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g;
const EXPLICIT_ANCHOR = /<a\s+(?:[^>]*?\s)?(?:id|name)="([^"]+)"/g;

/** @returns {string[]} repository-relative paths of the files to scan */
function trackedFiles() {
  /** @type {string[]} */
  let paths;
  try {
    paths = execFileSync('git', ['ls-files', '-z'], {
      cwd: root,
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      stdio: ['ignore', 'pipe', 'ignore'],
    })
      .split('\0')
      .filter(Boolean);
  } catch {
    // Not a git checkout (an unpacked archive): every file but what git would ignore.
    paths = walk(root).map((path) => relative(root, path).split('\\').join('/'));
  }
  return paths
    .filter((path) => !path.startsWith('fixtures/') && posix.basename(path) !== 'package-lock.json')
    .filter((path) => {
      const full = join(root, path);
      return existsSync(full) && statSync(full).isFile();
    })
    .sort();
}

/** @param {string} dir @returns {string[]} */
function walk(dir) {
  const skip = new Set(['.git', 'node_modules', 'dist', '.turbo', 'coverage', 'hil-reports']);
  /** @type {string[]} */
  const out = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    if (skip.has(entry.name)) continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...walk(path));
    else if (entry.isFile()) out.push(path);
  }
  return out;
}

/** @param {string} path @returns {string | undefined} the text, or undefined for a binary file */
function readText(path) {
  const bytes = readFileSync(join(root, path));
  if (bytes.subarray(0, 8192).includes(0)) return undefined;
  return bytes.toString('utf8');
}

/**
 * GitHub's anchor for a heading: lower case, punctuation removed, spaces as hyphens.
 * @param {string} heading the heading text, without the leading `#`s
 */
function slug(heading) {
  return heading
    .replace(/<[^>]*>/g, '')
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/**
 * @typedef {{ sections: Set<string>, anchors: Set<string> }} DocumentIndex
 * @type {Map<string, DocumentIndex | undefined>}
 */
const documents = new Map();

/**
 * The sections and anchors of a markdown file, or undefined when it does not exist.
 * @param {string} path repository-relative
 * @returns {DocumentIndex | undefined}
 */
function indexOf(path) {
  if (documents.has(path)) return documents.get(path);
  const full = join(root, path);
  /** @type {DocumentIndex | undefined} */
  let index;
  if (existsSync(full) && statSync(full).isFile()) {
    index = { sections: new Set(), anchors: new Set() };
    const seen = new Map();
    let fence = '';
    for (const line of readFileSync(full, 'utf8').split('\n')) {
      const opening = /^\s*(`{3,}|~{3,})/.exec(line);
      if (opening?.[1] !== undefined) {
        if (fence === '') fence = opening[1];
        else if (opening[1].startsWith(fence)) fence = '';
        continue;
      }
      if (fence !== '') continue;
      for (const match of line.matchAll(EXPLICIT_ANCHOR)) {
        const id = match[1] ?? '';
        index.anchors.add(id);
        const numbered = new RegExp(`^s(${SECTION})$`).exec(id);
        if (numbered?.[1] !== undefined) index.sections.add(numbered[1]);
      }
      const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
      if (heading?.[1] === undefined) continue;
      const text = heading[1];
      const number = new RegExp(`^(?:<[^>]*>\\s*)*(${SECTION})(?:\\.|\\s|$)`).exec(text);
      if (number?.[1] !== undefined) index.sections.add(number[1]);
      const base = slug(text);
      const count = seen.get(base) ?? 0;
      seen.set(base, count + 1);
      index.anchors.add(count === 0 ? base : `${base}-${count}`);
    }
  }
  documents.set(path, index);
  return index;
}

/** @type {string[]} */
const problems = [];
let citations = 0;

/**
 * @param {string} file where the citation is
 * @param {number} line 1-based
 * @param {string} target repository-relative markdown file
 * @param {string} shown how the citation names it
 * @param {{ anchor?: string, sections?: string[] }} part
 */
function check(file, line, target, shown, part) {
  citations++;
  const index = indexOf(target);
  if (index === undefined) {
    problems.push(`${file}:${line}: ${shown}: no such file`);
    return;
  }
  for (const section of part.sections ?? []) {
    if (!index.sections.has(section))
      problems.push(`${file}:${line}: ${shown} §${section}: ${target} has no section ${section}`);
  }
  if (part.anchor !== undefined && !index.anchors.has(part.anchor))
    problems.push(`${file}:${line}: ${shown}#${part.anchor}: ${target} has no such anchor`);
}

const files = trackedFiles();
for (const file of files) {
  const text = readText(file);
  if (text === undefined) continue;
  const markdown = file.endsWith('.md');
  let fence = '';
  for (const [number, line] of text.split('\n').entries()) {
    const at = number + 1;
    for (const match of line.matchAll(LEGACY)) {
      const name = match[1] ?? '';
      const section = match[2];
      const instead = `docs/${name.toLowerCase()}.md${section === undefined ? '' : ` §${section}`}`;
      problems.push(
        `${file}:${at}: cites ${name}.md, which is not in the repository: cite ${instead}`,
      );
    }
    for (const match of line.matchAll(DOCS_REFERENCE)) {
      const target = `docs/${match[1] ?? ''}`;
      /** @type {string[]} */
      const sections = [];
      if (match[3] !== undefined) sections.push(match[3]);
      for (const more of (match[4] ?? '').matchAll(MORE_SECTIONS)) sections.push(more[1] ?? '');
      check(file, at, target, target, {
        ...(match[2] === undefined ? {} : { anchor: match[2] }),
        sections,
      });
    }
    if (!markdown) continue;
    // Relative links between markdown files, outside code blocks.
    const opening = /^\s*(`{3,}|~{3,})/.exec(line);
    if (opening?.[1] !== undefined) {
      if (fence === '') fence = opening[1];
      else if (opening[1].startsWith(fence)) fence = '';
      continue;
    }
    if (fence !== '') continue;
    for (const match of line.replace(/`[^`]*`/g, '').matchAll(MARKDOWN_LINK)) {
      const link = match[1] ?? '';
      if (/^[a-z][a-z0-9+.-]*:/i.test(link) || link.startsWith('//')) continue;
      const hash = link.indexOf('#');
      const path = hash === -1 ? link : link.slice(0, hash);
      const anchor = hash === -1 ? undefined : decodeURIComponent(link.slice(hash + 1));
      if (path !== '' && !path.endsWith('.md')) continue;
      const target = path === '' ? file : posix.normalize(posix.join(posix.dirname(file), path));
      check(file, at, target, link.split('#')[0] || file, anchor === undefined ? {} : { anchor });
    }
  }
}

if (problems.length > 0) {
  for (const problem of problems) process.stderr.write(`${problem}\n`);
  process.stderr.write(
    `docs:check: ${problems.length} broken reference${problems.length === 1 ? '' : 's'} in ${files.length} files\n`,
  );
  process.exit(1);
}
process.stdout.write(`docs:check: ${citations} references in ${files.length} files, all resolve\n`);
