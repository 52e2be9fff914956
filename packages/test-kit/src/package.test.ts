/** The package's promises: no dependencies, nothing of ours, exports by name. */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const here = dirname(fileURLToPath(import.meta.url));
const packageJson = JSON.parse(readFileSync(join(here, '../package.json'), 'utf8'));
const sources = readdirSync(here).filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'));

describe('@xiaozhi-mcp/test-kit', () => {
  it('is private, with no runtime dependency', () => {
    expect(packageJson.private).toBe(true);
    expect(packageJson.dependencies ?? {}).toEqual({});
  });

  it('imports its own modules only', () => {
    for (const file of sources) {
      const text = readFileSync(join(here, file), 'utf8');
      for (const [, specifier] of text.matchAll(/from '([^']+)'/g))
        expect(specifier, `${file} imports ${specifier}`).toMatch(/^\.\/[\w-]+\.js$/);
    }
  });

  it('exports by name only', () => {
    expect(readFileSync(join(here, 'index.ts'), 'utf8')).not.toMatch(/export \*/);
  });
});
