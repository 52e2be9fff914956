import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { DEVICE_ERROR_CODES } from './errors.js';

const here = dirname(fileURLToPath(import.meta.url));

describe('@xiaozhi-mcp/device', () => {
  it('documents every error code in its README table', () => {
    const readme = readFileSync(join(here, '../README.md'), 'utf8');
    for (const code of DEVICE_ERROR_CODES) expect(readme).toContain(`| \`${code}\` |`);
  });

  it('exports by name only, from each of its entries', () => {
    for (const entry of ['index.ts', 'testing/index.ts'])
      expect(readFileSync(join(here, entry), 'utf8')).not.toMatch(/export \*/);
  });
});
