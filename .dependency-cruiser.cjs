// The dependency rules of docs/architecture.md#who-may-import-whom, checked by `npm test`
// (the root task `deps:check`: depcruise packages apps hil --config .dependency-cruiser.cjs).
//
// Each workspace is named by its folder; the config checks that the folder's package.json
// names the package the table says (@xiaozhi-mcp/<key>). Imports are resolved the way the
// typechecks resolve them (the `@xiaozhi-mcp/source` export condition), so a dependency on
// `@xiaozhi-mcp/server` ends at packages/server/src/index.ts and the rules below speak of
// folders. A workspace folder missing from the table may import only @xiaozhi-mcp/protocol
// until it is added.
const fs = require('node:fs');
const path = require('node:path');

const SCOPE = '@xiaozhi-mcp';
/** All of our workspaces, by where they live. */
const OURS = '^(packages/[^/]+|apps/[^/]+|hil)/';
/**
 * Tests, benchmarks and fuzz suites of a package (server may use the device SDK there, and
 * nowhere else). A `*.test-helper.ts` is what several test files share: test code too, never
 * built into dist.
 */
const TESTS = [
  '\\.test\\.[cm]?[jt]sx?$',
  '\\.test-helper\\.[cm]?[jt]sx?$',
  '/vitest\\.config\\.[cm]?[jt]s$',
];
const TESTS_AND_BENCH = [...TESTS, `${OURS}bench/`, `${OURS}fuzz/`];

/**
 * Who may import whom. `may`: the packages a workspace may import besides itself (`'*'`: every
 * library under packages/ but the test tools); `mayInTestsAndBench`: more, from its tests and
 * bench only; `testTool`: a package only tests, benchmarks and fuzz suites use.
 * @type {Record<string, { dir: string, may: string[] | '*', mayInTestsAndBench?: string[], testTool?: boolean }>}
 */
const LAYERS = {
  protocol: { dir: 'packages/protocol', may: [] },
  firmware: { dir: 'packages/firmware', may: ['protocol'] },
  serial: {
    dir: 'packages/serial',
    may: ['protocol', 'firmware'],
    mayInTestsAndBench: ['fuzz-kit', 'test-kit'],
  },
  device: {
    dir: 'packages/device',
    may: ['protocol', 'firmware', 'serial'],
    mayInTestsAndBench: ['fuzz-kit', 'test-kit'],
  },
  server: {
    dir: 'packages/server',
    may: ['protocol', 'firmware'],
    mayInTestsAndBench: ['device', 'fuzz-kit', 'test-kit'],
  },
  // Boards only through the server's HTTP API: the server and the device SDK in its tests only.
  bridge: {
    dir: 'packages/bridge',
    may: ['protocol'],
    mayInTestsAndBench: ['server', 'device', 'test-kit'],
  },
  // The fast-check harness and runner of every fuzz/ folder: fast-check only, nothing of ours.
  'fuzz-kit': { dir: 'packages/fuzz-kit', may: [], testTool: true },
  // What tests wait with (until): nothing of ours, no dependency.
  'test-kit': { dir: 'packages/test-kit', may: [], testTool: true },
  // The two composers stand side by side: each may use every library, never the other.
  hil: { dir: 'hil', may: '*', mayInTestsAndBench: ['test-kit'] },
  cli: { dir: 'apps/cli', may: '*', mayInTestsAndBench: ['test-kit'] },
};

const root = __dirname;
const escapeRegExp = (/** @type {string} */ s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const under = (/** @type {string} */ dir) => `^${escapeRegExp(dir)}/`;
const named = (/** @type {string} */ key) => `${SCOPE}/${key}`;

/** @returns {string[]} the workspace folders that exist now (packages/*, apps/*, hil). */
function workspaces() {
  const found = [];
  for (const parent of ['packages', 'apps']) {
    const at = path.join(root, parent);
    if (!fs.existsSync(at)) continue;
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const dir = `${parent}/${entry.name}`;
      if (entry.isDirectory() && fs.existsSync(path.join(root, dir, 'package.json')))
        found.push(dir);
    }
  }
  if (fs.existsSync(path.join(root, 'hil/package.json'))) found.push('hil');
  return found;
}

/** @param {string} dir */
function manifest(dir) {
  return JSON.parse(fs.readFileSync(path.join(root, dir, 'package.json'), 'utf8'));
}

const byDir = new Map(Object.entries(LAYERS).map(([key, layer]) => [layer.dir, key]));
for (const dir of workspaces()) {
  const key = byDir.get(dir);
  const name = manifest(dir).name;
  if (key === undefined) {
    // Not in the table yet: the strictest place, until docs/architecture.md and LAYERS say otherwise.
    const guess = String(name).replace(`${SCOPE}/`, '');
    LAYERS[guess in LAYERS ? dir : guess] = { dir, may: ['protocol'] };
  } else if (name !== named(key)) {
    throw new Error(
      `.dependency-cruiser.cjs: ${dir}/package.json is ${name}, expected ${named(key)}`,
    );
  }
}

/**
 * The source files behind each workspace's exports (the `@xiaozhi-mcp/source` targets): the
 * only files of a package another package may reach.
 */
const entryPoints = [];
for (const dir of workspaces()) {
  const exportsField = manifest(dir).exports ?? {};
  const targets = typeof exportsField === 'string' ? [exportsField] : Object.values(exportsField);
  for (const target of targets) {
    const file =
      typeof target === 'string' ? target : (target?.[`${SCOPE}/source`] ?? target?.default);
    if (typeof file === 'string') entryPoints.push(`^${escapeRegExp(path.posix.join(dir, file))}$`);
  }
}

const libraries = Object.values(LAYERS)
  .filter((l) => l.may !== '*' && !l.testTool)
  .map((l) => l.dir);

/** @type {import('dependency-cruiser').IForbiddenRuleType[]} */
const forbidden = [];
for (const [key, layer] of Object.entries(LAYERS)) {
  const allowed = layer.may === '*' ? libraries : layer.may.map((k) => LAYERS[k]?.dir ?? k);
  const extra = (layer.mayInTestsAndBench ?? []).map((k) => LAYERS[k]?.dir ?? k);
  const list = (/** @type {string[]} */ dirs) =>
    dirs.length === 0 ? 'nothing of ours' : dirs.map((d) => named(byDir.get(d) ?? d)).join(', ');
  forbidden.push({
    name: `${key}-imports`,
    comment: `${named(key)} (${layer.dir}) may import ${list(allowed)}${extra.length ? `, and ${list(extra)} in its tests and bench` : ''} (docs/architecture.md#who-may-import-whom)`,
    severity: 'error',
    from: { path: under(layer.dir) },
    to: { path: OURS, pathNot: [layer.dir, ...allowed, ...extra].map(under) },
  });
  if (extra.length > 0) {
    forbidden.push({
      name: `${key}-imports-outside-tests`,
      comment: `${named(key)} may import ${list(extra)} only in its tests and bench (docs/architecture.md#who-may-import-whom)`,
      severity: 'error',
      from: { path: under(layer.dir), pathNot: TESTS_AND_BENCH },
      to: { path: extra.map(under) },
    });
  }
}

forbidden.push(
  {
    name: 'no-circular',
    comment:
      'no import circles, between packages or between files: each module stands on the ones below it (docs/architecture.md#dependencies)',
    severity: 'error',
    from: {},
    to: { circular: true },
  },
  {
    name: 'test-helpers-in-tests-only',
    comment:
      'a *.test-helper.ts module is left out of dist: only tests, benchmarks and fuzz suites may import it',
    severity: 'error',
    from: { pathNot: TESTS_AND_BENCH },
    to: { path: '\\.test-helper\\.[cm]?[jt]sx?$' },
  },
  {
    name: 'no-deep-import',
    comment: `another package is reached only through its name and its exports (${SCOPE}/x, ${SCOPE}/device/testing), never a file inside it`,
    severity: 'error',
    from: { path: OURS },
    to: { path: OURS, pathNot: ['^$1/', ...entryPoints] },
  },
  {
    name: 'no-deep-import-unresolved',
    comment: `${SCOPE}/x/<path> that is not one of x's exports`,
    severity: 'error',
    from: {},
    to: { couldNotResolve: true, path: `^${escapeRegExp(SCOPE)}/` },
  },
  {
    name: 'firmware-no-serial-io',
    comment: `${named('firmware')} knows formats only: no serialport, no esptool-js (docs/architecture.md#who-may-import-whom)`,
    severity: 'error',
    from: { path: under(LAYERS.firmware.dir) },
    to: { path: '(^|/)node_modules/(serialport|@serialport/[^/]+|esptool-js)/' },
  },
  {
    name: 'server-no-esptool',
    comment: `${named('server')} never loads esptool-js, not even lazily (docs/architecture.md#who-may-import-whom)`,
    severity: 'error',
    from: { path: under(LAYERS.server.dir) },
    to: { path: '(^|/)node_modules/esptool-js/' },
  },
  {
    name: 'protocol-no-node',
    comment: `${named('protocol')} has no node: imports outside its tests (pure, no I/O)`,
    severity: 'error',
    from: { path: under(LAYERS.protocol.dir), pathNot: TESTS },
    to: { dependencyTypes: ['core'] },
  },
  {
    name: 'protocol-no-npm',
    comment: `${named('protocol')} has no npm dependencies outside its tests`,
    severity: 'error',
    from: { path: under(LAYERS.protocol.dir), pathNot: TESTS },
    to: { path: '(^|/)node_modules/' },
  },
  {
    name: 'protocol-no-unresolved-package',
    comment: `${named('protocol')} imports nothing it cannot resolve to its own files`,
    severity: 'error',
    from: { path: under(LAYERS.protocol.dir), pathNot: TESTS },
    to: { couldNotResolve: true, pathNot: '^\\.' },
  },
);

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden,
  options: {
    doNotFollow: { path: '(^|/)node_modules/' },
    exclude: { path: '(^|/)(dist|coverage|\\.turbo)/' },
    // `import type` counts: a type from a package is a dependency on it.
    tsPreCompilationDeps: true,
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: [`${SCOPE}/source`, 'import', 'require', 'node', 'default'],
      mainFields: ['module', 'main', 'types', 'typings'],
      extensions: ['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs', '.json', '.d.ts'],
    },
    reporterOptions: { text: { highlightFocused: true } },
  },
};
