#!/usr/bin/env node
// Committed entry point, so npm can link the bin before `dist/` is built (npm ci builds it in `prepare`).
import '../dist/cli.js';
