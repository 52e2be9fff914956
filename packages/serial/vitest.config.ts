import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Tests run in vite's SSR environment, whose resolver reads `ssr.resolve.conditions`: without
  // it, workspace packages would load from their (possibly stale) dist/ builds.
  resolve: { conditions: ['@xiaozhi-mcp/source'] },
  ssr: { resolve: { conditions: ['@xiaozhi-mcp/source'] } },
  test: {
    include: ['src/**/*.test.ts'],
    testTimeout: 20_000,
    // The board locks of tests that take them by default (rfc2217:// ports), away from the
    // host's own in /run/lock: a test worker that ends without releasing leaves its entries.
    env: { XIAOZHI_LOCK_DIR: join(tmpdir(), 'xiaozhi-mcp-serial-test-locks') },
  },
});
