#!/usr/bin/env node
// What each workspace exports and how much of it another workspace imports: the public-surface
// figures of a structure review (`node scripts/surface.mjs [--unused]`). Reads every entry of each
// package.json `exports` (their `@xiaozhi-mcp/source` files) with the TypeScript checker, and every
// import of `@xiaozhi-mcp/...` in the other workspaces' sources, tests and benches included.
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');
const showUnused = process.argv.includes('--unused');

const workspaces = [];
for (const parent of ['packages', 'apps']) {
  for (const name of fs.readdirSync(path.join(root, parent))) workspaces.push(`${parent}/${name}`);
}
workspaces.push('hil');

/** @returns {Map<string, string>} entry specifier (e.g. @xiaozhi-mcp/device/testing) -> source file */
function entries(dir) {
  const manifest = JSON.parse(fs.readFileSync(path.join(root, dir, 'package.json'), 'utf8'));
  const out = new Map();
  const field = manifest.exports ?? {};
  for (const [key, target] of Object.entries(typeof field === 'string' ? { '.': field } : field)) {
    const file =
      typeof target === 'string' ? target : (target?.['@xiaozhi-mcp/source'] ?? target?.default);
    if (typeof file === 'string' && file.endsWith('.ts'))
      out.set(path.posix.join(manifest.name, key), path.join(root, dir, file));
  }
  return out;
}

function sourceFiles(dir) {
  const out = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      if (['node_modules', 'dist', '.turbo', 'coverage'].includes(e.name)) continue;
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(m?ts|mjs|js)$/.test(e.name) && !e.name.endsWith('.d.ts')) out.push(p);
    }
  };
  walk(path.join(root, dir));
  return out;
}

const allEntries = new Map(workspaces.map((w) => [w, entries(w)]));
const program = ts.createProgram(
  [...allEntries.values()].flatMap((m) => [...m.values()]),
  {
    allowJs: false,
    noEmit: true,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
  },
);
const checker = program.getTypeChecker();
const exportedNames = (file) => {
  const sf = program.getSourceFile(file);
  const sym = sf && checker.getSymbolAtLocation(sf);
  return sym ? checker.getExportsOfModule(sym).map((s) => s.name) : [];
};

/** specifier -> Set of names imported from it by other workspaces */
const imported = new Map();
for (const w of workspaces) {
  for (const file of sourceFiles(w)) {
    const text = fs.readFileSync(file, 'utf8');
    const sf = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true);
    const visit = (node) => {
      if (
        (ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) &&
        node.moduleSpecifier &&
        ts.isStringLiteral(node.moduleSpecifier)
      ) {
        const spec = node.moduleSpecifier.text;
        const owner = [...allEntries].find(([, m]) => m.has(spec))?.[0];
        if (owner && owner !== w) {
          const set = imported.get(spec) ?? new Set();
          imported.set(spec, set);
          const clause = ts.isImportDeclaration(node)
            ? node.importClause?.namedBindings
            : node.exportClause;
          if (clause && (ts.isNamedImports(clause) || ts.isNamedExports(clause)))
            for (const el of clause.elements) set.add((el.propertyName ?? el.name).text);
          else if (clause) set.add('*');
        }
      }
      if (
        ts.isCallExpression(node) &&
        node.expression.kind === ts.SyntaxKind.ImportKeyword &&
        ts.isStringLiteral(node.arguments[0] ?? {})
      ) {
        const spec = node.arguments[0].text;
        if ([...allEntries].some(([o, m]) => o !== w && m.has(spec))) {
          const set = imported.get(spec) ?? imported.set(spec, new Set()).get(spec);
          // `const { a, b } = await import(x)` names what it takes; a bare `await import(x)` takes nothing.
          const decl = ts.isAwaitExpression(node.parent) ? node.parent.parent : node.parent;
          if (ts.isVariableDeclaration(decl) && ts.isObjectBindingPattern(decl.name))
            for (const el of decl.name.elements) set.add((el.propertyName ?? el.name).getText(sf));
          else if (!ts.isExpressionStatement(decl)) set.add('*');
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
}

// A name no other workspace imports may still be public: for the package's users, when its
// README names it. `--check` fails on every exported name that is neither.
const readmeOf = (dir) => {
  const file = path.join(root, dir, 'README.md');
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
};
const documented = (readme, name) => new RegExp(`\\b${name.replace(/\$/g, '\\$')}\\b`).test(readme);

const check = process.argv.includes('--check');
const unexplained = [];
const rows = [
  '| entry | exported names | imported by another workspace | else named in its README |',
  '|---|---|---|---|',
];
for (const [dir, m] of allEntries) {
  const readme = readmeOf(dir);
  for (const [spec, file] of m) {
    const names = exportedNames(file);
    const used = imported.get(spec) ?? new Set();
    const unused = names.filter((n) => !used.has(n) && !used.has('*'));
    const forUsers = unused.filter((n) => documented(readme, n));
    rows.push(
      `| ${spec} | ${names.length} | ${names.length - unused.length}${used.has('*') ? ' (namespace import)' : ''} | ${forUsers.length} |`,
    );
    if (showUnused && unused.length) rows.push(`  not imported elsewhere: ${unused.join(', ')}`);
    for (const name of unused) if (!documented(readme, name)) unexplained.push(`${spec}: ${name}`);
  }
}
if (!check) console.log(rows.join('\n'));
else if (unexplained.length > 0) {
  for (const line of unexplained)
    process.stderr.write(
      `${line}: exported, but no other workspace imports it and its README does not name it\n`,
    );
  process.exit(1);
} else {
  console.log(
    `surface: ${rows.length - 2} entries; every exported name is imported by another workspace or named in its README`,
  );
}
