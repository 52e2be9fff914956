export { DEFAULT_UNTIL_TIMEOUT_MS, type UntilOptions, UntilTimeout, until } from './until.js';
