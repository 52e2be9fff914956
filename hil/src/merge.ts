/**
 * `hil merge REPORT...` (docs/ci.md §2): the reports of several rigs (jobs of a CI matrix) as one
 * qualification report. Each board becomes `<rig>/<board>` and keeps its checks, latency and
 * artefact links; the qualification table says each board's verdict per build. The merged
 * report is a `RunReport`, so every reporter renders it and `hil compare` compares it.
 */
import { basename, dirname, relative, resolve, sep } from 'node:path';
import {
  type BoardReport,
  type ExitCode,
  type Qualification,
  type QualificationEntry,
  type RunReport,
  type RunSummary,
  SUITE_NAMES,
  summarize,
} from './model.js';
import {
  escapeHtml,
  markdownCode,
  markdownTable,
  markdownText,
  stripControl,
} from './reporters/escape.js';

export interface MergeInput {
  readonly rig: string;
  readonly file: string;
  readonly report: RunReport;
}

export interface MergeOptions {
  /** Where the merged report goes: artefact links are rewritten relative to it. */
  readonly outDir: string;
  /** Rigs that must have sent a report. */
  readonly expect?: readonly string[];
  /** The hil that merges (the merged report's `tool.version`). */
  readonly toolVersion: string;
}

/** `rig-a=path` or `path`; a folder's name names its rig (CI artefacts are named per rig). */
export function parseMergeArgument(argument: string): { rig: string | undefined; path: string } {
  const at = argument.indexOf('=');
  if (at > 0 && /^[\w.-]+$/.test(argument.slice(0, at)))
    return { rig: argument.slice(0, at), path: argument.slice(at + 1) };
  return { rig: undefined, path: argument };
}

/**
 * The rig a report came from when the command line does not name it: its folder's name
 * (`hil-reports-lab-1` is `lab-1`), else, for the default folder `hil-reports`, the host it ran on.
 */
export function rigNameFor(file: string, host?: string): string {
  const folder = basename(dirname(resolve(file)));
  if (folder === 'hil-reports' && host !== undefined && host !== '') return host;
  return folder.replace(/^hil-reports-/, '') || 'rig';
}

/** The build a board ran: the flashed file's version, else the version the board was flashed with or reported. */
function buildOf(report: RunReport, board: BoardReport): string {
  return (
    report.firmware?.version ??
    board.image?.version ??
    board.expectedVersion ??
    board.firmwareVersion ??
    'unknown build'
  );
}

function relink(path: string | undefined, file: string, outDir: string): string | undefined {
  if (path === undefined) return undefined;
  return relative(resolve(outDir), resolve(dirname(file), path))
    .split(sep)
    .join('/');
}

function unique<T>(values: readonly T[]): T[] {
  return [...new Set(values)];
}

export function mergeReports(inputs: readonly MergeInput[], options: MergeOptions): RunReport {
  const builds = unique(
    inputs.flatMap(({ report }) => report.boards.map((b) => buildOf(report, b))),
  );
  const several = builds.length > 1;
  const boards: BoardReport[] = [];
  const entries: QualificationEntry[] = [];
  const keys = new Set<string>();
  for (const { rig, file, report } of inputs) {
    for (const board of report.boards) {
      const build = buildOf(report, board);
      let key = several ? `${rig}/${board.name}@${build}` : `${rig}/${board.name}`;
      for (let n = 2; keys.has(key); n++) key = `${rig}/${board.name}#${n}`;
      keys.add(key);
      const consoleLog = relink(board.consoleLog, file, options.outDir);
      const transcript = relink(board.transcript, file, options.outDir);
      boards.push({
        ...board,
        name: key,
        ...(consoleLog === undefined ? {} : { consoleLog }),
        ...(transcript === undefined ? {} : { transcript }),
      });
      entries.push({
        rig,
        board: board.name,
        key,
        build,
        status: board.status,
        ...(board.variant === undefined ? {} : { variant: board.variant }),
        ...(board.firmwareVersion === undefined ? {} : { firmwareVersion: board.firmwareVersion }),
      });
    }
  }
  const rigs = new Set(inputs.map((i) => i.rig));
  const missing = (options.expect ?? []).filter((rig) => !rigs.has(rig));
  if (missing.length > 0 && builds.length === 0) builds.push('unknown build');
  for (const rig of missing) {
    entries.push({
      rig,
      board: '(no report)',
      key: rig,
      build: builds[0] ?? 'unknown build',
      status: 'missing',
    });
  }

  const starts = inputs.map((i) => Date.parse(i.report.startedAt)).filter(Number.isFinite);
  const ends = inputs
    .map((i) => Date.parse(i.report.startedAt) + (i.report.durationMs ?? 0))
    .filter(Number.isFinite);
  const first = starts.length === 0 ? Date.now() : Math.min(...starts);
  const last = ends.length === 0 ? first : Math.max(...ends);
  const firmwares = unique(inputs.map((i) => i.report.firmware?.sha256));
  const firmware =
    firmwares.length === 1 && firmwares[0] !== undefined ? inputs[0]?.report.firmware : undefined;
  const interrupted = inputs.some((i) => i.report.interrupted);
  const exitCode: ExitCode =
    missing.length > 0 ||
    interrupted ||
    // A board cut short (rig failed, or interrupted) has no verdict: its rig failed.
    boards.some((b) => b.status !== 'passed' && b.status !== 'failed') ||
    inputs.some((i) => i.report.exitCode === 3)
      ? 3
      : boards.some((b) => b.status === 'failed') || inputs.some((i) => i.report.exitCode === 1)
        ? 1
        : 0;
  const suites = SUITE_NAMES.filter((s) => inputs.some((i) => i.report.suites.includes(s)));
  const join = (values: readonly string[]) => unique(values).join(', ');
  // A rig that sent no report is a rig failure; it is the root cause when no board failed.
  const counted = summarize(boards);
  const [absent] = missing;
  const summary: RunSummary = {
    ...counted,
    rigFailures: counted.rigFailures + missing.length,
    ...(counted.rootCause !== undefined || absent === undefined
      ? {}
      : {
          rootCause: {
            rig: absent,
            reason: 'sent no report, though --expect named it',
            skipped: 0,
            laterFailures: 0,
          },
        }),
  };
  // One host when every rig ran on the same one; else the reports name each rig's host.
  const hosts = unique(inputs.map((i) => JSON.stringify(i.report.host ?? null)));
  const host = hosts.length === 1 ? inputs[0]?.report.host : undefined;
  return {
    tool: { name: 'hil', version: options.toolVersion },
    startedAt: new Date(first).toISOString(),
    durationMs: last - first,
    rig: inputs.every((i) => i.report.rig === 'virtual') ? 'virtual' : 'inventory',
    server: {
      ota: join(inputs.map((i) => i.report.server.ota)),
      websocket: join(inputs.map((i) => i.report.server.websocket)),
    },
    ...(host === undefined ? {} : { host }),
    ...(firmware === undefined ? {} : { firmware }),
    suites,
    boards,
    summary,
    exitCode,
    interrupted,
    qualification: {
      sources: inputs.map(({ rig, file, report }) => ({
        rig,
        file,
        startedAt: report.startedAt,
        exitCode: report.exitCode,
        interrupted: report.interrupted,
        boards: report.boards.length,
        ...(report.firmware === undefined ? {} : { firmware: report.firmware.version }),
        ...(report.host === undefined ? {} : { host: report.host.hostname }),
      })),
      builds,
      entries,
      missing,
    },
  };
}

// ---- Rendering the table --------------------------------------------------------------------

const STATUS_EMOJI: Readonly<Record<string, string>> = {
  passed: '✅',
  failed: '❌',
  'rig-failed': '💥',
  interrupted: '⏹️',
  missing: '❔',
};

const STATUS_WORD: Readonly<Record<string, string>> = {
  passed: 'passed',
  failed: 'failed',
  'rig-failed': 'rig failed',
  interrupted: 'interrupted',
  missing: 'no report',
};

function word(status: QualificationEntry['status']): string {
  return STATUS_WORD[status] ?? status;
}

/** Rows: one per rig and board; columns: one per build; cells: the verdicts. */
export function qualificationMatrix(q: Qualification): {
  rows: {
    rig: string;
    board: string;
    variant: string | undefined;
    cells: QualificationEntry[][];
  }[];
} {
  const rows = new Map<
    string,
    { rig: string; board: string; variant: string | undefined; cells: QualificationEntry[][] }
  >();
  for (const entry of q.entries) {
    const id = `${entry.rig}\u0000${entry.board}`;
    let row = rows.get(id);
    if (row === undefined) {
      row = {
        rig: entry.rig,
        board: entry.board,
        variant: entry.variant,
        cells: q.builds.map(() => []),
      };
      rows.set(id, row);
    }
    row.cells[Math.max(0, q.builds.indexOf(entry.build))]?.push(entry);
  }
  return { rows: [...rows.values()] };
}

export function renderQualificationText(q: Qualification): string {
  const { rows } = qualificationMatrix(q);
  const header = ['rig', 'board', ...q.builds];
  const body = rows.map((row) => [
    row.rig,
    row.board,
    ...row.cells.map((cell) => cell.map((e) => word(e.status)).join(', ') || '–'),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    `  ${cells.map((c, i) => stripControl(c).padEnd(widths[i] ?? 0)).join('  ')}`.trimEnd();
  const out = ['', 'Qualification (boards × builds)', line(header), ...body.map(line)];
  for (const rig of q.missing) out.push(`  ✗ rig ${rig}: no report (the rig failed)`);
  return `${out.join('\n')}\n`;
}

export function renderQualificationMarkdown(q: Qualification): string {
  const { rows } = qualificationMatrix(q);
  const out = [
    '### Qualification: boards × builds',
    '',
    ...markdownTable(
      ['Rig', 'Board', 'Variant', ...q.builds.map(markdownText)],
      rows.map((row) => [
        markdownCode(row.rig),
        markdownCode(row.board),
        markdownText(row.variant ?? '–'),
        ...row.cells.map(
          (cell) =>
            cell.map((e) => `${STATUS_EMOJI[e.status] ?? '⚠️'} ${word(e.status)}`).join('<br>') ||
            '–',
        ),
      ]),
    ),
    '',
    `From ${q.sources.length} report${q.sources.length === 1 ? '' : 's'}: ${q.sources.map((s) => `${markdownCode(s.rig)} (${s.host === undefined ? '' : `on ${markdownText(s.host)}, `}exit ${s.exitCode}${s.interrupted ? ', interrupted' : ''})`).join(', ')}.`,
    ...(q.missing.length === 0
      ? []
      : [
          '',
          `**No report from ${q.missing.map(markdownCode).join(', ')}**: counted as rig failures.`,
        ]),
    '',
  ];
  return `${out.join('\n')}\n`;
}

export function renderQualificationHtml(q: Qualification): string {
  const h = escapeHtml;
  const { rows } = qualificationMatrix(q);
  const cls = (status: QualificationEntry['status']) =>
    status === 'passed' || status === 'failed' ? status : 'rig-failed';
  return [
    '<section class="board qualification" id="qualification" data-testid="qualification">',
    `<h2>Qualification: boards × builds <span class="counts">${h(`${q.sources.length} reports`)}</span></h2>`,
    '<table><thead><tr><th>Rig</th><th>Board</th><th>Variant</th>',
    ...q.builds.map((b) => `<th>${h(b)}</th>`),
    '</tr></thead><tbody>',
    ...rows.map(
      (row) =>
        `<tr data-testid="qualification-row" data-rig="${h(row.rig)}" data-board="${h(row.board)}"><td><code>${h(row.rig)}</code></td><td><code>${h(row.board)}</code></td><td>${h(row.variant ?? '–')}</td>${row.cells
          .map(
            (cell) =>
              `<td>${cell.map((e) => `<span class="pill ${cls(e.status)}">${h(word(e.status))}</span>`).join(' ') || '–'}</td>`,
          )
          .join('')}</tr>`,
    ),
    '</tbody></table>',
    '</section>',
  ].join('\n');
}
