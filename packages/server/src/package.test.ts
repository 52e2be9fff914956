import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { SERVER_ERROR_CODES } from './errors.js';

const here = dirname(fileURLToPath(import.meta.url));

describe('@xiaozhi-mcp/server', () => {
  it('documents every error code in its README table', () => {
    const readme = readFileSync(join(here, '../README.md'), 'utf8');
    for (const code of SERVER_ERROR_CODES) expect(readme).toContain(`| \`${code}\` |`);
  });
});
