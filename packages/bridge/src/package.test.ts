import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BRIDGE_VERSION } from './bridge.js';
import { BRIDGE_ERROR_CODES } from './errors.js';

const here = dirname(fileURLToPath(import.meta.url));

describe('@xiaozhi-mcp/bridge', () => {
  it('documents every error code in its README table', () => {
    const readme = readFileSync(join(here, '../README.md'), 'utf8');
    for (const code of BRIDGE_ERROR_CODES) expect(readme).toContain(`| \`${code}\` |`);
  });

  it('reports its package version as serverInfo.version', () => {
    const manifest = JSON.parse(readFileSync(join(here, '../package.json'), 'utf8'));
    expect(BRIDGE_VERSION).toBe(manifest.version);
  });
});
