/**
 * What `hil` loads before it parses its arguments: its static import graph from the CLI. The
 * rig (backend, board runner, suites) loads with `hil run` while the attached ports are listed,
 * the `bridge` suite's bridge and MCP SDK when that opt-in suite runs, the inventory's schema
 * validator with the first inventory read. Each is still reached, lazily, from where it is used.
 */
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const src = dirname(fileURLToPath(import.meta.url));

/** The specifiers a module loads when evaluated (`static`) and those it loads on demand (`lazy`). */
function importsOf(file: string): { static: string[]; lazy: string[] } {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022);
  const found = { static: [] as string[], lazy: [] as string[] };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node) && ts.isStringLiteral(node.moduleSpecifier)) {
      // `import type` and imports naming only types are erased (verbatimModuleSyntax).
      const clause = node.importClause;
      const named = clause?.namedBindings;
      const typesOnly =
        clause?.isTypeOnly === true ||
        (clause?.name === undefined &&
          named !== undefined &&
          ts.isNamedImports(named) &&
          named.elements.length > 0 &&
          named.elements.every((element) => element.isTypeOnly));
      if (!typesOnly) found.static.push(node.moduleSpecifier.text);
    } else if (
      ts.isExportDeclaration(node) &&
      !node.isTypeOnly &&
      node.moduleSpecifier !== undefined &&
      ts.isStringLiteral(node.moduleSpecifier)
    ) {
      found.static.push(node.moduleSpecifier.text);
    } else if (
      ts.isCallExpression(node) &&
      node.expression.kind === ts.SyntaxKind.ImportKeyword &&
      node.arguments[0] !== undefined &&
      ts.isStringLiteral(node.arguments[0])
    ) {
      found.lazy.push(node.arguments[0].text);
    } else if (
      ts.isCallExpression(node) &&
      ts.isCallExpression(node.expression) &&
      ts.isIdentifier(node.expression.expression) &&
      node.expression.expression.text === 'createRequire' &&
      node.arguments[0] !== undefined &&
      ts.isStringLiteral(node.arguments[0])
    ) {
      found.lazy.push(node.arguments[0].text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

const sourceOf = (from: string, specifier: string) =>
  resolve(dirname(from), specifier.replace(/\.js$/, '.ts'));

/** hil's own modules a module's evaluation loads, and the packages they load. */
function staticGraph(entry: string): { files: Set<string>; packages: Set<string> } {
  const files = new Set<string>([entry]);
  const packages = new Set<string>();
  const queue = [entry];
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    for (const specifier of importsOf(file).static) {
      if (!specifier.startsWith('.')) {
        packages.add(specifier);
        continue;
      }
      const next = sourceOf(file, specifier);
      if (files.has(next)) continue;
      files.add(next);
      queue.push(next);
    }
  }
  return { files, packages };
}

const cli = join(src, 'cli.ts');

describe("hil's start-up", () => {
  const { files, packages } = staticGraph(cli);
  const loaded = [...packages];

  it('loads neither the backend nor the board runner nor the suites before `hil run` asks for them', () => {
    expect(loaded.filter((p) => p.startsWith('@xiaozhi-mcp/server'))).toEqual([]);
    for (const module of ['rig.ts', 'board-runner.ts', 'suites/index.ts'])
      expect(files.has(join(src, module)), module).toBe(false);
    // `hil run` imports the rig itself, and the rig loads the backend.
    expect(importsOf(cli).lazy).toContain('./rig.js');
    expect(staticGraph(join(src, 'rig.ts')).packages).toContain('@xiaozhi-mcp/server');
  });

  it('loads the bridge, the MCP SDK and the schema validator only where they are used', () => {
    const lazyOnes = [/^@modelcontextprotocol\/sdk(\/|$)/, /^@xiaozhi-mcp\/bridge$/, /^ajv$/];
    for (const entry of [cli, join(src, 'rig.ts')]) {
      const reached = [...staticGraph(entry).packages];
      expect(reached.filter((p) => lazyOnes.some((pattern) => pattern.test(p)))).toEqual([]);
    }
    expect(importsOf(join(src, 'suites/bridge.ts')).lazy).toEqual([
      '@modelcontextprotocol/sdk/client/index.js',
      '@modelcontextprotocol/sdk/client/streamableHttp.js',
      '@xiaozhi-mcp/bridge',
    ]);
    expect(importsOf(join(src, 'inventory.ts')).lazy).toContain('ajv');
  });
});
