// Do saved bench runs agree? Reads the `--json` output of each run (bench/run.ts) and prints,
// per ratio of the verdict, each run's value, their median and the largest deviation from it,
// and whether every run is within 15% of the median.
//
//   node bench/dist/agree.js run1.json run2.json run3.json
//
// A file written with `--runs N` counts as its N runs. Exit codes: 0 they agree, 4 they do not,
// 1 an error (a file missing or not a bench output).
import { readFileSync } from 'node:fs';
import { agreement, agreementTable } from './figures.js';

interface Saved {
  runs?: { verdict?: { ratios?: Record<string, number> } }[];
}

const files = process.argv.slice(2);
if (files.length < 2 || files.includes('--help')) {
  console.error('usage: node bench/dist/agree.js RUN.json RUN.json [RUN.json ...]');
  process.exit(1);
}
const ratios: Record<string, number>[] = [];
for (const file of files) {
  let saved: Saved;
  try {
    saved = JSON.parse(readFileSync(file, 'utf8')) as Saved;
  } catch (error) {
    console.error(`agree: ${file}: ${(error as Error).message}`);
    process.exit(1);
  }
  if (!Array.isArray(saved.runs)) {
    console.error(`agree: ${file} is not the --json output of bench/run.ts`);
    process.exit(1);
  }
  for (const run of saved.runs) ratios.push(run.verdict?.ratios ?? {});
}
const rows = agreement(ratios);
console.log(agreementTable(rows).join('\n'));
process.exit(rows.every((r) => r.agree) ? 0 : 4);
