// @xiaozhi-mcp/hil: rigs, suites and reports for xiaozhi boards. Named exports only.

export {
  applyBaseline,
  type Baseline,
  type BaselineDeviation,
  BaselineError,
  DEFAULT_BASELINE_PATH,
  FIXED_DEVIATION_NOTE,
  loadBaseline,
  parseBaseline,
} from './baseline.js';
export { type CompareOptions, compareReports } from './compare/compare.js';
export { type LoadedReport, loadReport, ReportInputError } from './compare/load.js';
export { DEFAULT_COMPARE_THRESHOLDS } from './compare/rules.js';
export { type MannWhitneyResult, mannWhitneyU } from './compare/stats.js';
export {
  type BoardConfig,
  boardEntryFor,
  DEFAULT_VIRTUAL_RIG,
  InventoryError,
  type LatencyConfig,
  loadInventory,
  parseInventory,
  type ResetStyle,
  type RigConfig,
  SCHEMA_PATH,
  type SessionStart,
  sessionStartFor,
} from './inventory.js';
export { type MergeInput, type MergeOptions, mergeReports } from './merge.js';
export {
  type BoardReport,
  type BoardStatus,
  type BoardTransport,
  type CheckResult,
  type CheckStatus,
  type CompareThresholds,
  type Comparison,
  type ComparisonFinding,
  DEFAULT_SUITES,
  type ExitCode,
  exitCodeFor,
  type LatencyComparison,
  type LatencyStats,
  type Qualification,
  type QualificationEntry,
  type RigStep,
  type RigStepName,
  type RunReport,
  type RunSummary,
  type Severity,
  SUITE_NAMES,
  type SuiteName,
  summarize,
} from './model.js';
export {
  ConsoleReporter,
  type ConsoleReporterOptions,
  isLiveTerminal,
  renderConsoleSummary,
  type StepDetail,
  type StepStatus,
} from './reporters/console.js';
export {
  REPORTER_NAMES,
  REPORTERS,
  type Reporter,
  type ReporterName,
  type WriteReportsOptions,
  writeReports,
} from './reporters/index.js';
export {
  type BootButton,
  CheckFailure,
  type CheckSpec,
  expectThat,
  type LatencyBudget,
  runCheck,
  type Suite,
  type SuiteBoard,
  type SuiteContext,
  type SuiteOutcome,
} from './suite.js';
export { allCheckIds, SUITE_CHECKS, SUITES } from './suites/index.js';
