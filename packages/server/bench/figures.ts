// Figures across rounds and runs: medians with their spread, and whether runs agree.
// Shared by bench/run.ts (`--runs`) and bench/agree.ts (saved `--json` outputs).

export function median(values: readonly number[]): number {
  const sorted = values.filter((v) => !Number.isNaN(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return Number.NaN;
  const mid = sorted.length >> 1;
  return sorted.length % 2
    ? (sorted[mid] as number)
    : ((sorted[mid - 1] as number) + (sorted[mid] as number)) / 2;
}

/** The median of `values`, their min and max, and the largest distance from the median as % of it. */
export interface Spread {
  median: number;
  min: number;
  max: number;
  spreadPct: number;
  values: number[];
}

export function spreadOf(values: readonly number[]): Spread {
  const m = median(values);
  const real = values.filter((v) => !Number.isNaN(v));
  const min = real.length ? Math.min(...real) : Number.NaN;
  const max = real.length ? Math.max(...real) : Number.NaN;
  const spreadPct = m === 0 ? 0 : (Math.max(max - m, m - min) / Math.abs(m)) * 100;
  return { median: m, min, max, spreadPct, values: [...values] };
}

/** Runs agree on a ratio when every run's value is within this of their median. */
export const AGREE_WITHIN_PCT = 15;

export interface Agreement {
  ratio: string;
  values: number[];
  median: number;
  maxDeviationPct: number;
  agree: boolean;
}

/** Per ratio named in any run: each run's value, their median, the max deviation, agree or not. */
export function agreement(runs: readonly Record<string, number>[]): Agreement[] {
  const names = [...new Set(runs.flatMap((r) => Object.keys(r)))];
  return names.map((ratio) => {
    const values = runs.map((r) => r[ratio] ?? Number.NaN);
    const s = spreadOf(values);
    const complete = values.every((v) => !Number.isNaN(v));
    return {
      ratio,
      values,
      median: s.median,
      maxDeviationPct: s.spreadPct,
      agree: complete && s.spreadPct <= AGREE_WITHIN_PCT,
    };
  });
}

export function fmt(value: number | undefined): string {
  if (value === undefined || Number.isNaN(value)) return '—';
  const a = Math.abs(value);
  if (a >= 100) return String(Math.round(value));
  if (a >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

export function agreementTable(rows: readonly Agreement[]): string[] {
  const runs = rows[0]?.values.length ?? 0;
  const head = [
    'ratio'.padEnd(26),
    ...Array.from({ length: runs }, (_, i) => `run ${i + 1}`.padStart(9)),
    'median'.padStart(9),
    'max dev'.padStart(9),
    '  agree',
  ];
  const out = [head.join('')];
  for (const row of rows) {
    out.push(
      [
        row.ratio.padEnd(26),
        ...row.values.map((v) => (Number.isNaN(v) ? '—' : `${fmt(v)}×`).padStart(9)),
        `${fmt(row.median)}×`.padStart(9),
        `${row.maxDeviationPct.toFixed(1)}%`.padStart(9),
        `  ${row.agree ? 'yes' : 'NO'}`,
      ].join(''),
    );
  }
  const all = rows.length > 0 && rows.every((r) => r.agree);
  out.push(
    `${all ? 'agree' : 'do NOT agree'}: ${runs} runs, every ratio within ${AGREE_WITHIN_PCT}% of its median — ${all ? 'yes' : 'no'}`,
  );
  return out;
}
