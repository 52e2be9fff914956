import { configDefaults, defineConfig } from 'vitest/config';

export default defineConfig({
  // Tests run in vite's SSR environment, whose resolver reads `ssr.resolve.conditions`: without
  // it, workspace packages would load from their (possibly stale) dist/ builds.
  resolve: { conditions: ['@xiaozhi-mcp/source'] },
  ssr: { resolve: { conditions: ['@xiaozhi-mcp/source'] } },
  test: {
    include: ['src/**/*.test.ts'],
    // rig.test.ts is the tests' shared rig (a server and virtual boards), not a suite: named
    // *.test.ts so that it stays out of the build and may use the server and the device SDK.
    exclude: [...configDefaults.exclude, 'src/rig.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
