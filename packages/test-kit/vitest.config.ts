import { defineConfig } from 'vitest/config';

export default defineConfig({
  // Tests run in vite's SSR environment, whose resolver reads `ssr.resolve.conditions`: without
  // it, workspace packages would load from their (possibly stale) dist/ builds.
  resolve: { conditions: ['@xiaozhi-mcp/source'] },
  ssr: { resolve: { conditions: ['@xiaozhi-mcp/source'] } },
  test: { include: ['src/**/*.test.ts'], testTimeout: 20_000 },
});
