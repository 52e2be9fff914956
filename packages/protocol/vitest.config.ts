import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Tests run in vite's SSR environment, whose resolver reads `ssr.resolve.conditions`: without
  // it, workspace packages would load from their (possibly stale) dist/ builds.
  resolve: { conditions: ['@xiaozhi-mcp/source'] },
  ssr: { resolve: { conditions: ['@xiaozhi-mcp/source'] } },
  // The hostile-input tests walk 100,000-deep values and run fast-check properties: well under a
  // second alone, but CI runs every package's tests at once on two cores. A hang guard, not a speed test.
  test: { include: ['src/**/*.test.ts'], testTimeout: 20_000 },
});
