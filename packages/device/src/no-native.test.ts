/**
 * A program that only runs virtual boards, or speaks MCP as a device, should not load what real
 * serial hardware, flashing and the command line need: importing `@xiaozhi-mcp/device` loads
 * neither serialport's native binding (`@serialport/bindings-cpp`, nor `serialport`, which loads
 * it), nor `esptool-js`, nor the CLI's `commander` and `cli-progress`, not even lazily
 * (docs/architecture.md, "Who may import whom"). The device SDK reaches the serial layer only
 * through its narrow port-provider entry, `@xiaozhi-mcp/serial/provider`. Two checks:
 *
 * - the import graph of the sources, followed from `src/index.ts` through the workspace
 *   packages as TypeScript resolves them: no import of one of them, static or dynamic (a lazy
 *   `await import('esptool-js')` counts), and no import of serial but through its provider entry;
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
const deviceEntry = join(root, 'packages/device/src/index.ts');

/** Module specifiers the device SDK may never reach. */
const FORBIDDEN_SPECIFIERS = [
  /^@serialport\/bindings-cpp(\/|$)/,
  /^serialport(\/|$)/,
  /^esptool-js(\/|$)/,
  /^commander(\/|$)/,
  /^cli-progress(\/|$)/,
  // The serial layer only through the entry made for port providers.
  /^@xiaozhi-mcp\/serial(\/(?!provider$).*)?$/,
  // Above the device SDK.
  /^@xiaozhi-mcp\/(server|bridge|hil|cli)(\/|$)/,
];
/** The same, as files on disk (relative to the repository root, `/` separated). */
const FORBIDDEN_FILES = [
  /(^|\/)node_modules\/@serialport\/bindings-cpp\//,
  /(^|\/)node_modules\/serialport\//,
  /(^|\/)node_modules\/esptool-js\//,
  /(^|\/)node_modules\/commander\//,
  /(^|\/)node_modules\/cli-progress\//,
  /^packages\/serial\/src\/index\.ts$/,
  /^packages\/serial\/src\/commands\//,
  /^packages\/(server|bridge)\//,
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
  const config = ts.readConfigFile(join(root, 'packages/device/tsconfig.json'), ts.sys.readFile);
  return ts.parseJsonConfigFileContent(config.config, ts.sys, join(root, 'packages/device'))
    .options;
})();

/**
 * What a module imports: every specifier it names, and those left once types are erased (as
 * `verbatimModuleSyntax` erases them: `import type` and `export type ... from` only; an
 * `import { type A }` still loads its module). Read from the syntax tree, which is a tenth of
 * the cost of transpiling each file, so the walk stays quick on a busy machine.
 */
function importsOf(file: string): { all: string[]; runtime: string[] } {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022);
  const all: string[] = [];
  const runtime: string[] = [];
  const add = (specifier: ts.Node | undefined, typeOnly: boolean) => {
    if (specifier === undefined || !ts.isStringLiteralLike(specifier)) return;
    all.push(specifier.text);
    if (!typeOnly) runtime.push(specifier.text);
  };
  const visit = (node: ts.Node): void => {
    if (ts.isImportDeclaration(node)) {
      add(node.moduleSpecifier, node.importClause?.isTypeOnly === true);
    } else if (ts.isExportDeclaration(node)) {
      add(node.moduleSpecifier, node.isTypeOnly);
    } else if (
      ts.isImportEqualsDeclaration(node) &&
      ts.isExternalModuleReference(node.moduleReference)
    ) {
      add(node.moduleReference.expression, node.isTypeOnly);
    } else if (ts.isImportTypeNode(node)) {
      // `typeof import('x')` in a type: erased.
      if (ts.isLiteralTypeNode(node.argument)) add(node.argument.literal, true);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      add(node.arguments[0], false);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return { all, runtime };
}

/** Shared by every walk: the same directories and packages are looked up again and again. */
const resolutions = ts.createModuleResolutionCache(root, (name) => name, compilerOptions);

interface Graph {
  /** Source files reached at runtime, from the entry. */
  readonly files: string[];
  /** Packages outside the workspace reached (`ws`, `mqtt`), by specifier. */
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
    // A type-only import loads nothing, but the rule is that the device never imports these.
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
      const resolved = ts.resolveModuleName(specifier, file, compilerOptions, ts.sys, resolutions)
        .resolvedModule?.resolvedFileName;
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

/**
 * A child node transpiling every source it loads takes 2 s quiet and 5 s beside two busy
 * processes on two cores; a machine running every package's tests at once is slower still.
 */
const CHILD_BUDGET_MS = 120_000;

interface Loaded {
  /** `specifier` and the file it resolved to, for every ESM resolution. */
  readonly resolved: { specifier: string; path: string }[];
  /** Every CommonJS module loaded (`require.cache`), e.g. mqtt's. */
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
await import('@xiaozhi-mcp/device');
process.stdout.write(JSON.stringify(Object.keys(createRequire(${JSON.stringify(base)}).cache)));
`;
  const child = spawn(
    process.execPath,
    ['--conditions=@xiaozhi-mcp/source', '--input-type=module', '-e', script],
    { cwd: join(root, 'packages/device'), stdio: ['ignore', 'pipe', 'pipe'] },
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
    // Under the test's own budget, so a hung child is named by the error below.
    const timer = setTimeout(() => child.kill('SIGKILL'), CHILD_BUDGET_MS - 10_000);
    child.on('close', (exit) => {
      clearTimeout(timer);
      done(exit);
    });
  });
  if (code !== 0)
    throw new Error(`importing @xiaozhi-mcp/device failed (exit ${code}):\n${stderr}`);
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

describe('@xiaozhi-mcp/device loads no native binding, flasher or CLI code', () => {
  let work: string;

  beforeAll(() => {
    work = mkdtempSync(join(tmpdir(), 'device-no-native-'));
  });

  afterAll(() => {
    rmSync(work, { recursive: true, force: true });
  });

  // CPU-bound (a parse per source file): a budget for a machine running every package's tests.
  it('imports none of them from its sources, statically or lazily', { timeout: 60_000 }, () => {
    const graph = walk(deviceEntry);
    expect(graph.violations).toEqual([]);
    const files = graph.files.map(rootRelative);
    expect(files[0]).toBe('packages/device/src/index.ts');
    // Not vacuous: the walk went through the virtual board and into the serial provider entry.
    expect(files).toContain('packages/device/src/serial/virtual-store.ts');
    expect(files).toContain('packages/serial/src/provider.ts');
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
      "export { flash } from './flash.js';\nimport type { Flasher } from '@xiaozhi-mcp/serial';\nexport type F = Flasher;\n",
    );
    file(
      'flash.ts',
      "export async function flash() {\n  const { ESPLoader } = await import('esptool-js');\n  return ESPLoader;\n}\n",
    );
    const graph = walk(entry);
    expect(graph.violations).toEqual([
      `${rootRelative(entry)} imports @xiaozhi-mcp/serial`,
      `${rootRelative(join(dir, 'flash.ts'))} imports esptool-js`,
    ]);
  });

  it('loads none of them when imported for real', { timeout: CHILD_BUDGET_MS }, async () => {
    const loaded = await importInChild(work);
    const paths = [...loaded.resolved.map((r) => r.path), ...loaded.commonjs];
    // It was the device's source that loaded, and the serial provider entry under it.
    const files = loaded.resolved.map((r) => rootRelative(r.path));
    expect(files).toContain('packages/device/src/index.ts');
    expect(files).toContain('packages/serial/src/provider.ts');
    expect(loaded.resolved.map((r) => r.specifier)).toContain('ws');
    expect(loaded.resolved.filter((r) => forbiddenSpecifier(r.specifier))).toEqual([]);
    expect(paths.filter(forbiddenFile).map(rootRelative)).toEqual([]);
  });
});
