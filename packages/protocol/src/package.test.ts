/** The package's promises: pure TypeScript, no runtime dependencies, every error code documented. */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { JsonRpcErrorCode, PROTOCOL_ERROR_CODES } from './errors.js';

const here = dirname(fileURLToPath(import.meta.url));
const packageJson = JSON.parse(readFileSync(join(here, '../package.json'), 'utf8'));
const readme = readFileSync(resolve(here, '../../../README.md'), 'utf8');
const files = readdirSync(here).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'));
const sources = files.filter((f) => !f.endsWith('.test-helper.ts'));
// What several test files share; the build leaves these out of dist.
const testHelpers = files.filter((f) => f.endsWith('.test-helper.ts'));
const buildConfig = JSON.parse(readFileSync(join(here, '../tsconfig.build.json'), 'utf8'));

describe('@xiaozhi-mcp/protocol', () => {
  it('has no runtime dependencies', () => {
    expect(packageJson.dependencies ?? {}).toEqual({});
  });

  it('imports nothing from node: or any package, only its own modules', () => {
    for (const file of sources) {
      const text = readFileSync(join(here, file), 'utf8');
      const imports = [...text.matchAll(/from '([^']+)'/g)].map((m) => m[1]);
      for (const specifier of imports)
        expect(specifier, `${file} imports ${specifier}`).toMatch(/^\.\/[\w-]+\.js$/);
      expect(text, file).not.toMatch(/\b(process|Buffer|require)\s*[.(]/);
    }
  });

  it('keeps its test helpers out of dist, and as pure as its sources but for the test tools', () => {
    expect(buildConfig.exclude).toContain('src/**/*.test-helper.ts');
    for (const file of testHelpers) {
      const text = readFileSync(join(here, file), 'utf8');
      const imports = [...text.matchAll(/from '([^']+)'/g)].map((m) => m[1]);
      for (const specifier of imports)
        expect(specifier, `${file} imports ${specifier}`).toMatch(
          /^(\.\/[\w.-]+\.js|vitest|fast-check)$/,
        );
      expect(text, file).not.toMatch(/\b(process|Buffer|require)\s*[.(]/);
    }
  });

  it('exports by name only', () => {
    expect(readFileSync(join(here, 'index.ts'), 'utf8')).not.toMatch(/export \*/);
  });

  it('documents every local error code and JSON-RPC code in the README table', () => {
    for (const code of PROTOCOL_ERROR_CODES) expect(readme).toContain(`| \`${code}\` |`);
    for (const [name, code] of Object.entries(JsonRpcErrorCode)) {
      expect(readme).toMatch(new RegExp(`\\| ${code} \\| \`${name}\``));
    }
  });
});
