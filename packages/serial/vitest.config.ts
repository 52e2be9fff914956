import { defineConfig } from 'vitest/config';

export default defineConfig({
  resolve: { conditions: ['@xiaozhi-mcp/source'] },
  test: { include: ['src/**/*.test.ts'], testTimeout: 20_000 },
});
