// @xiaozhi-mcp/fuzz-kit: the fast-check harness and runner of every fuzz/ folder. Named exports
// only, grouped by who uses them; README.md lists them.

// Adversarial texts and bytes the targets build their inputs from (server, device, serial fuzz/):

export {
  badUtf8,
  binaryBytes,
  capped,
  cutFractions,
  deepNesting,
  fragment,
  hugeString,
  objectText,
  repeatedToken,
  scalarText,
  small,
  splitAtCuts,
} from './arbitraries.js';

// A target as one property, for fuzz/ and the hostile-input tests (server, device, serial):

export {
  type AnyTarget,
  CaseFailure,
  describeError,
  erase,
  type FuzzTarget,
  fuzzProperty,
  nestingDepth,
  type ProcessEvent,
  ProcessWatch,
  type PropertyOptions,
  preview,
  TargetStats,
} from './harness.js';

// The whole npm run fuzz of a package, from its fuzz/run.ts (server, device, serial):

export { type FuzzSuite, type FuzzWorldSetup, runFuzz, type WeightedTarget } from './runner.js';
