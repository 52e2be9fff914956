import { mkdtempSync } from 'node:fs';
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
    testTimeout: 60_000,
    env: {
      // An inventory's virtual:NAME is the user's stored board of that name: tests (and the hil
      // processes they start, which inherit it) never read or write the user's own store.
      XIAOZHI_VIRTUAL_DIR: mkdtempSync(join(tmpdir(), 'hil-virtual-')),
      // The locks rfc2217:// boards take, away from the host's own in /run/lock.
      XIAOZHI_LOCK_DIR: join(tmpdir(), 'xiaozhi-mcp-hil-test-locks'),
    },
  },
});
