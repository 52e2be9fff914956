import {
  buildToolsPage,
  byteLength,
  encodeDeviceError,
  encodeDeviceResult,
  PAGE_SLACK_BYTES,
  ProtocolError,
  pageBudgetBytes,
  parseToolSet,
} from '@xiaozhi-mcp/protocol';
import type { Command } from 'commander';
import { CliError, type CliIo, ExitCode, readJsonFile } from '../io.js';

export interface PageOptions {
  tools: string;
  cursor?: string;
  withUserTools?: boolean;
  id?: number;
  json?: boolean;
}

/** Prints the `tools/list` page the firmware would send for a tool set. */
export async function pageCommand(io: CliIo, options: PageOptions): Promise<number> {
  const input = await readJsonFile(io, options.tools);
  let entries: ReturnType<typeof parseToolSet>;
  try {
    entries = parseToolSet(input);
  } catch (error) {
    if (error instanceof ProtocolError)
      throw new CliError(`${options.tools}: ${error.message}`, ExitCode.usage);
    throw error;
  }
  const tools = entries.map((entry) => entry.tool);
  const page = buildToolsPage(tools, {
    cursor: options.cursor,
    withUserTools: options.withUserTools === true,
  });

  if (options.json) {
    const report = page.ok
      ? {
          ok: true,
          tools: page.tools.map((t) => t.name),
          nextCursor: page.nextCursor ?? null,
          resultBytes: byteLength(page.result),
          budgetBytes: pageBudgetBytes(page.tools.map((t) => t.json)) + PAGE_SLACK_BYTES,
          result: JSON.parse(page.result) as unknown,
        }
      : { ok: false, error: page.message, tool: page.toolName };
    io.stdout(`${JSON.stringify(report)}\n`);
    return page.ok ? ExitCode.ok : ExitCode.failed;
  }
  if (options.id !== undefined) {
    // The whole reply payload, exactly as the device puts it inside the envelope.
    io.stdout(
      `${page.ok ? encodeDeviceResult(options.id, page.result) : encodeDeviceError(options.id, page.message)}\n`,
    );
  } else if (page.ok) {
    io.stdout(`${page.result}\n`);
  }
  if (!page.ok)
    throw new CliError(
      `the firmware answers this page with an error: ${page.message}`,
      ExitCode.failed,
    );
  return ExitCode.ok;
}

function parseId(value: string): number {
  const id = Number(value);
  if (!Number.isInteger(id))
    throw new CliError(`--id must be an integer, got ${JSON.stringify(value)}`, ExitCode.usage);
  return id;
}

export function registerPage(program: Command, io: CliIo, setExit: (code: number) => void): void {
  program
    .command('page')
    .description(
      'print the tools/list page the firmware would send for a tool set (corpus tool format)',
    )
    .requiredOption(
      '--tools <file>',
      'tool set: a JSON array of tool definitions, or a corpus case with "tools"',
    )
    .option('--cursor <name>', 'start at this tool (the firmware cursor is a tool name)')
    .option('--with-user-tools', 'include user-only tools, as withUserTools: true does')
    .option(
      '--id <n>',
      'print the whole JSON-RPC reply with this id, byte for byte as the device sends it',
      parseId,
    )
    .option('--json', 'print a JSON report: tool names, nextCursor, byte counts and the page')
    .action(async (options: PageOptions) => setExit(await pageCommand(io, options)));
}
