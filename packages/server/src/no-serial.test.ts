/**
 * The backend runs where no board is attached: importing `@xiaozhi-mcp/server` must load
 * neither the serial layer (`@xiaozhi-mcp/serial`) nor what it stands on (`serialport`,
 * `@serialport/*`, `esptool-js`), not even lazily (docs/architecture.md, "Who may import
 * whom"). Three checks, from the cheapest to the most literal:
 *
 * - the manifests: no runtime dependency of the server, or of a workspace package it depends
 *   on, is one of them;
 * - the import graph of the sources, followed from `src/index.ts` through the workspace
 *   packages as TypeScript resolves them: no import of one, static or dynamic (a lazy
 *   `await import('esptool-js')` counts), and no path from the server to a package that
 *   imports one;
 * - a real import, in a child `node` that loads the sources (transpiled on the fly, no build
 *   needed): every module it resolves, ESM or CommonJS, is recorded and none is one of them.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const serverEntry = join(root, 'packages/server/src/index.ts');

/** Module specifiers the server may never reach. */
const FORBIDDEN_SPECIFIERS = [
  /^@xiaozhi-mcp\/serial(\/|$)/,
  /^serialport(\/|$)/,
  /^@serialport\//,
  /^esptool-js(\/|$)/,
  // Above the server, or beside it only in its tests (device) or not at all.
  /^@xiaozhi-mcp\/(device|hil|cli)(\/|$)/,
];
/** The same, as files on disk (relative to the repository root, `/` separated). */
const FORBIDDEN_FILES = [
  /^packages\/serial\//,
  /(^|\/)node_modules\/serialport\//,
  /(^|\/)node_modules\/@serialport\//,
  /(^|\/)node_modules\/esptool-js\//,
  /^packages\/device\//,
  /^hil\//,
  /^apps\/cli\//,
];

const forbiddenSpecifier = (specifier: string) =>
  FORBIDDEN_SPECIFIERS.some((pattern) => pattern.test(specifier));
const rootRelative = (path: string) => relative(root, path).split(sep).join('/');
const forbiddenFile = (path: string) =>
  FORBIDDEN_FILES.some((pattern) => pattern.test(rootRelative(path)));

// ---------------------------------------------------------------------------------------
// The sources' import graph

const compilerOptions: ts.CompilerOptions = (() => {
  const config = ts.readConfigFile(join(root, 'packages/server/tsconfig.json'), ts.sys.readFile);
  return ts.parseJsonConfigFileContent(config.config, ts.sys, join(root, 'packages/server'))
    .options;
})();

/** Resolutions shared across the walk: most files import the same few packages. */
const resolutionCache = ts.createModuleResolutionCache(
  join(root, 'packages/server'),
  (name) => name,
  compilerOptions,
);

/**
 * What a module imports: every specifier it names, and those left once types are erased. The
 * erasure is read off the syntax tree as `verbatimModuleSyntax` does it (an `import type` or
 * `export type` goes, any other import stays, as do `import()` and `require()`), which is a parse
 * per file where a full transpile cost four times as much.
 */
function importsOf(file: string): { all: string[]; runtime: string[] } {
  const source = readFileSync(file, 'utf8');
  const all = ts.preProcessFile(source, true, true).importedFiles.map((f) => f.fileName);
  const runtime: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      if (!node.importClause?.isTypeOnly && ts.isStringLiteral(node.moduleSpecifier))
        runtime.push(node.moduleSpecifier.text);
      return;
    }
    if (ts.isExportDeclaration(node)) {
      if (!node.isTypeOnly && node.moduleSpecifier && ts.isStringLiteral(node.moduleSpecifier))
        runtime.push(node.moduleSpecifier.text);
      return;
    }
    if (ts.isImportEqualsDeclaration(node)) {
      const reference = node.moduleReference;
      if (
        !node.isTypeOnly &&
        ts.isExternalModuleReference(reference) &&
        ts.isStringLiteral(reference.expression)
      )
        runtime.push(reference.expression.text);
      return;
    }
    if (ts.isImportTypeNode(node)) return;
    if (ts.isCallExpression(node)) {
      const [argument] = node.arguments;
      const loads =
        node.expression.kind === ts.SyntaxKind.ImportKeyword ||
        (ts.isIdentifier(node.expression) && node.expression.text === 'require');
      if (loads && node.arguments.length === 1 && argument && ts.isStringLiteralLike(argument))
        runtime.push(argument.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(ts.createSourceFile(file, source, ts.ScriptTarget.ES2022, false));
  return { all, runtime };
}

interface Graph {
  /** Source files reached at runtime, from the entry. */
  readonly files: string[];
  /** Packages outside the workspace reached (`ws`, `pino`), by specifier. */
  readonly external: Set<string>;
  /** `file imports specifier`, for every forbidden import or unresolvable one. */
  readonly violations: string[];
}

/**
 * Follows the runtime imports from `entry`, through relative paths and `@xiaozhi-mcp/*`
 * packages (their source, as the `@xiaozhi-mcp/source` condition resolves them); stops at
 * external packages and `node:` built-ins.
 */
function walk(entry: string): Graph {
  const files: string[] = [];
  const external = new Set<string>();
  const violations: string[] = [];
  const seen = new Set<string>([entry]);
  const queue = [entry];
  for (let file = queue.shift(); file !== undefined; file = queue.shift()) {
    files.push(file);
    const { all, runtime } = importsOf(file);
    // A type-only import loads nothing, but the rule is that the server never imports these.
    for (const specifier of all)
      if (forbiddenSpecifier(specifier))
        violations.push(`${rootRelative(file)} imports ${specifier}`);
    for (const specifier of runtime) {
      if (specifier.startsWith('node:')) continue;
      const relativeOrOurs = specifier.startsWith('.') || specifier.startsWith('@xiaozhi-mcp/');
      if (!relativeOrOurs) {
        external.add(specifier);
        continue;
      }
      const resolved = ts.resolveModuleName(
        specifier,
        file,
        compilerOptions,
        ts.sys,
        resolutionCache,
      ).resolvedModule?.resolvedFileName;
      if (resolved === undefined || !/\.ts$/.test(resolved) || /\.d\.ts$/.test(resolved)) {
        violations.push(`${rootRelative(file)} imports ${specifier}, which resolves to no source`);
        continue;
      }
      if (forbiddenFile(resolved)) {
        if (!forbiddenSpecifier(specifier))
          violations.push(`${rootRelative(file)} imports ${specifier} (${rootRelative(resolved)})`);
      } else if (!seen.has(resolved)) {
        seen.add(resolved);
        queue.push(resolved);
      }
    }
  }
  return { files, external, violations };
}

// ---------------------------------------------------------------------------------------
// A real import in a child process

/**
 * Module hooks for the child: `.ts` sources transpiled as the build would (types erased),
 * `./x.js` found as `./x.ts`, and every resolved module appended to the log.
 */
const HOOKS = `
import { appendFileSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
let ts;
let log;
export async function initialize(data) {
  ts = createRequire(data.base)('typescript');
  log = data.log;
}
export async function resolve(specifier, context, next) {
  let result;
  try {
    result = await next(specifier, context);
  } catch (error) {
    const fromSource = context.parentURL !== undefined && context.parentURL.endsWith('.ts');
    if (error?.code !== 'ERR_MODULE_NOT_FOUND' || !fromSource || !specifier.endsWith('.js'))
      throw error;
    result = await next(specifier.slice(0, -3) + '.ts', context);
  }
  appendFileSync(log, specifier + '\\t' + result.url + '\\n');
  return result;
}
export async function load(url, context, next) {
  if (!url.startsWith('file:') || !url.endsWith('.ts')) return next(url, context);
  const file = fileURLToPath(url);
  const { outputText } = ts.transpileModule(readFileSync(file, 'utf8'), {
    fileName: file,
    compilerOptions: {
      module: ts.ModuleKind.ESNext,
      target: ts.ScriptTarget.ES2022,
      verbatimModuleSyntax: true,
    },
  });
  return { format: 'module', source: outputText, shortCircuit: true };
}
`;

interface Loaded {
  /** `specifier` and the file it resolved to, for every ESM resolution. */
  readonly resolved: { specifier: string; path: string }[];
  /** Every CommonJS module loaded (`require.cache`), e.g. pino's. */
  readonly commonjs: string[];
}

async function importInChild(work: string): Promise<Loaded> {
  const hooks = join(work, 'hooks.mjs');
  const log = join(work, 'resolved.log');
  writeFileSync(hooks, HOOKS);
  writeFileSync(log, '');
  const base = join(root, 'package.json');
  const script = `
import { createRequire, register } from 'node:module';
register(${JSON.stringify(pathToFileURL(hooks).href)}, {
  data: { base: ${JSON.stringify(base)}, log: ${JSON.stringify(log)} },
});
await import('@xiaozhi-mcp/server');
process.stdout.write(JSON.stringify(Object.keys(createRequire(${JSON.stringify(base)}).cache)));
`;
  const child = spawn(
    process.execPath,
    ['--conditions=@xiaozhi-mcp/source', '--input-type=module', '-e', script],
    { cwd: join(root, 'packages/server'), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString();
  });
  const code = await new Promise<number | null>((done) => {
    // A hang guard, under the test's own bound, so a stuck import reports its stderr.
    const timer = setTimeout(() => child.kill('SIGKILL'), 50_000);
    child.on('close', (exit) => {
      clearTimeout(timer);
      done(exit);
    });
  });
  if (code !== 0)
    throw new Error(`importing @xiaozhi-mcp/server failed (exit ${code}):\n${stderr}`);
  const resolved = readFileSync(log, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => {
      const [specifier = '', url = ''] = line.split('\t');
      return { specifier, path: url.startsWith('file:') ? fileURLToPath(url) : url };
    });
  return { resolved, commonjs: JSON.parse(stdout) as string[] };
}

// ---------------------------------------------------------------------------------------

interface Manifest {
  name: string;
  dependencies?: Record<string, string>;
}

function manifest(dir: string): Manifest {
  return JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;
}

describe('@xiaozhi-mcp/server loads no serial code', () => {
  let work: string;

  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'server-no-serial-'));
  });

  afterAll(() => {
    rmSync(work, { recursive: true, force: true });
  });

  it('depends, at runtime and through its workspace packages, on none of them', () => {
    const checked: string[] = [];
    const problems: string[] = [];
    const visit = (dir: string) => {
      const pkg = manifest(dir);
      if (checked.includes(pkg.name)) return;
      checked.push(pkg.name);
      for (const dependency of Object.keys(pkg.dependencies ?? {})) {
        if (forbiddenSpecifier(dependency)) problems.push(`${pkg.name} depends on ${dependency}`);
        else if (dependency.startsWith('@xiaozhi-mcp/'))
          visit(join(root, 'node_modules', dependency));
      }
    };
    visit(join(root, 'packages/server'));
    expect(problems).toEqual([]);
    expect(checked).toContain('@xiaozhi-mcp/server');
  });

  it('imports none of them from its sources, statically or lazily', () => {
    const graph = walk(serverEntry);
    expect(graph.violations).toEqual([]);
    const files = graph.files.map(rootRelative);
    expect(files[0]).toBe('packages/server/src/index.ts');
    // Not vacuous: the walk went through the server and into the packages it uses.
    expect(files).toContain('packages/server/src/server.ts');
    expect(files.some((f) => f.startsWith('packages/protocol/src/'))).toBe(true);
    expect([...graph.external].filter(forbiddenSpecifier)).toEqual([]);
    expect(graph.external).toContain('ws');
  });

  it('the import graph check catches an import of them, even a lazy one', () => {
    const dir = mkdtempSync(join(work, 'planted-'));
    const file = (name: string, text: string) => {
      writeFileSync(join(dir, name), text);
      return join(dir, name);
    };
    const entry = file(
      'index.ts',
      "export { flash } from './flash.js';\nimport type { PortInfo } from '@xiaozhi-mcp/serial';\nexport type P = PortInfo;\n" +
        // Type-only imports load nothing: the walk must not follow them (there is no file).
        "import type { Gone } from './gone.js';\nexport type { Kept } from './gone.js';\nexport type G = Gone;\n" +
        "export { open } from './open.js';\n",
    );
    file('open.ts', "export const open = () => require('serialport');\n");
    file(
      'flash.ts',
      "export async function flash() {\n  const { ESPLoader } = await import('esptool-js');\n  return ESPLoader;\n}\n",
    );
    const graph = walk(entry);
    expect(graph.violations).toEqual([
      `${rootRelative(entry)} imports @xiaozhi-mcp/serial`,
      `${rootRelative(join(dir, 'flash.ts'))} imports esptool-js`,
      `${rootRelative(join(dir, 'open.ts'))} imports serialport`,
    ]);
  });

  it('loads none of them when imported for real', { timeout: 60_000 }, async () => {
    const loaded = await importInChild(work);
    const paths = [...loaded.resolved.map((r) => r.path), ...loaded.commonjs];
    // It was the server's source that loaded, and the packages under it.
    expect(loaded.resolved.map((r) => rootRelative(r.path))).toContain(
      'packages/server/src/index.ts',
    );
    expect(loaded.resolved.map((r) => r.specifier)).toContain('pino');
    expect(loaded.resolved.filter((r) => forbiddenSpecifier(r.specifier))).toEqual([]);
    expect(paths.filter(forbiddenFile).map(rootRelative)).toEqual([]);
  });
});
