export { CliError, type CliIo, ExitCode } from './io.js';
export { createProgram, run, VERSION } from './program.js';
