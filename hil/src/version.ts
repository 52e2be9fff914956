/**
 * The tool's version, as its package says (the same from src/ and from dist/). Its own module:
 * the commands that print it (`--version`, compare, merge) load none of the rig.
 */
import { createRequire } from 'node:module';

export const HIL_VERSION: string = (
  createRequire(import.meta.url)('../package.json') as { version: string }
).version;
