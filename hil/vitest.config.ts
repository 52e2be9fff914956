import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: { conditions: ['@xiaozhi-mcp/source'] },
  test: { include: ['src/**/*.test.ts'], testTimeout: 60_000 },
});
