/**
 * A replica as a board preset: the MCP server registers the replica's tools in listing order
 * (user-only ones as user tools, listed last), so paging and argument validation are the
 * firmware's own. A tool answers a call with recorded arguments with its recorded reply after
 * its recorded delay; any other call with the replica's default for the tool, else the tool's
 * last recorded reply, else `true` (what a firmware callback returning true sends).
 * `self.reboot` and `self.upgrade_firmware` do what the firmware's do to the board.
 */
import {
  type DeviceHello,
  encodeDeviceError,
  ImageContent,
  type JsonRpcId,
  type PropertyValue,
  parseToolSet,
  readJsonRpc,
  readToolResult,
  type Tool,
  type ToolReturn,
  validateArgumentValues,
  type WireError,
} from '@xiaozhi-mcp/protocol';
import type { BoardApi, BoardPreset, ChipModel } from '../board-api.js';
import type { ToolHandler } from '../mcp-server.js';
import { plainHardware } from '../presets.js';
import { rebootTool, upgradeFirmwareTool } from '../tools/common-tools.js';
import { frozenHello } from '../virtual-board/session.js';
import type { ReplicaCall, ReplicaFile } from './replica-file.js';

/** What a tool's callback returns so that the firmware's encoder sends `reply` again. */
interface Answer {
  readonly value?: ToolReturn;
  /** The tool fails with this message: the firmware's error reply. */
  readonly error?: string;
}

function base64Bytes(data: string): Uint8Array {
  return Uint8Array.from(Buffer.from(data, 'base64'));
}

/**
 * The message of an error reply as its bytes were recorded. The firmware does not escape it:
 * a message with a quote is invalid JSON, which `readJsonRpc` recovers as is, but one with a
 * backslash can parse, and its decoded text would be answered with other bytes.
 */
function recordedMessage(reply: string, id: JsonRpcId | null, error: WireError): string {
  if (error.recovered || typeof id !== 'number') return error.message;
  // The firmware's error reply around an empty message: what is between is the message.
  const empty = encodeDeviceError(id, '');
  const cut = empty.indexOf('""') + 1;
  const head = empty.slice(0, cut);
  const tail = empty.slice(cut);
  return reply.length >= empty.length && reply.startsWith(head) && reply.endsWith(tail)
    ? reply.slice(head.length, reply.length - tail.length)
    : error.message;
}

/**
 * Reads a recorded `tools/call` reply payload back into what the tool returned: the text of a
 * text item, the bytes of an image item, or the message of an error reply as recorded.
 */
export function replyAnswer(reply: string): Answer {
  const message = readJsonRpc(reply);
  if (message.kind === 'error') return { error: recordedMessage(reply, message.id, message.error) };
  if (message.kind !== 'result') return { error: reply };
  const result = readToolResult(message.result);
  const item = result.content[0];
  let value: ToolReturn = '';
  if (item?.type === 'text' && typeof item.text === 'string') value = item.text;
  else if (
    item?.type === 'image' &&
    typeof item.mimeType === 'string' &&
    typeof item.data === 'string'
  ) {
    value = new ImageContent(item.mimeType, base64Bytes(item.data));
  }
  // The firmware never sends isError true for a tool; a failing tool is an error reply.
  if (result.isError) return { error: typeof value === 'string' ? value : '' };
  return { value };
}

/** A call's values as the firmware received them (defaults applied, declaration order), as JSON. */
function valuesKey(values: ReadonlyMap<string, PropertyValue>): string {
  return JSON.stringify([...values]);
}

function answer(result: Answer): ToolReturn {
  if (result.error !== undefined) throw new Error(result.error);
  return result.value ?? true;
}

/**
 * How many calls of each tool and values a board has answered: the n-th call with recorded
 * values answers the n-th recorded reply for them (the last one once they run out), so a
 * sequence replayed (set the volume, read it back) reads what the recorded board said.
 */
type CallCounts = Map<string, number>;

function toolHandler(replica: ReplicaFile, tool: Tool, counts: CallCounts): ToolHandler {
  const recorded = new Map<string, ReplicaCall[]>();
  let last: ReplicaCall | undefined;
  for (const call of replica.calls ?? []) {
    if (call.tool !== tool.name) continue;
    // Arguments the firmware refuses never reach the tool: the board answers those itself.
    const outcome = validateArgumentValues(tool, call.arguments);
    if (!outcome.ok) continue;
    const key = valuesKey(outcome.values);
    const calls = recorded.get(key);
    if (calls === undefined) recorded.set(key, [call]);
    else calls.push(call);
    last = call;
  }
  const stated = replica.defaults?.[tool.name];
  const fallback: Answer | undefined =
    stated !== undefined
      ? stated.isError === true
        ? { error: stated.text }
        : { value: stated.text }
      : last !== undefined
        ? replyAnswer(last.reply)
        : undefined;
  return async (args) => {
    const key = valuesKey(args.values);
    const calls = recorded.get(key);
    if (calls === undefined) return fallback === undefined ? true : answer(fallback);
    const counted = `${tool.name}\u0000${key}`;
    const n = counts.get(counted) ?? 0;
    counts.set(counted, n + 1);
    const call = calls[Math.min(n, calls.length - 1)] as ReplicaCall;
    if (call.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, call.delayMs));
    return answer(replyAnswer(call.reply));
  };
}

/**
 * The firmware's tools that act on the board itself keep their effect on a replica board: a
 * recording holds no reply of theirs (the board rebooted first), and a rig's reboot and OTA
 * checks need the board to do it.
 */
const BOARD_ACTIONS: Record<string, (board: BoardApi) => ToolHandler> = {
  'self.reboot': rebootTool,
  'self.upgrade_firmware': upgradeFirmwareTool,
};

/**
 * The recorded hello as the board will send it, when it reads as one (a hello with a string
 * transport); a replica without a readable hello sends its build's own.
 */
function recordedHello(text: string | undefined): DeviceHello | undefined {
  if (text === undefined) return undefined;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  const hello = value as Partial<Record<string, unknown>> | null;
  if (typeof hello !== 'object' || hello === null || Array.isArray(hello)) return undefined;
  if (hello.type !== 'hello' || typeof hello.transport !== 'string') return undefined;
  return frozenHello(value as DeviceHello);
}

/** A board preset running the replica's tools; `new VirtualBoard({ preset })` boots it. */
export function replicaPreset(replica: ReplicaFile): BoardPreset {
  const entries = parseToolSet(replica.tools);
  const callCounts = new WeakMap<object, CallCounts>();
  const hello = recordedHello(replica.hello);
  return {
    ...(hello === undefined ? {} : { hello }),
    name: replica.board.variant,
    chip: replica.board.chip as ChipModel,
    flashSizeMb: replica.board.flashSizeMb as BoardPreset['flashSizeMb'],
    display: undefined,
    camera: false,
    backlight: false,
    hardware: plainHardware,
    registerTools: (server, board) => {
      // Counted per board across its reboots (its NVS storage outlives them), not per preset:
      // boards started from one replica each replay the recording on their own.
      let counts = callCounts.get(board.storage);
      if (counts === undefined) {
        counts = new Map();
        callCounts.set(board.storage, counts);
      }
      for (const { tool } of entries) {
        const { name, description, properties } = tool;
        const action = Object.hasOwn(BOARD_ACTIONS, name) ? BOARD_ACTIONS[name] : undefined;
        const handler = action === undefined ? toolHandler(replica, tool, counts) : action(board);
        if (tool.userOnly) server.addUserOnlyTool({ name, description, properties }, handler);
        else server.addTool({ name, description, properties }, handler);
      }
    },
  };
}

/** Options to spread into `VirtualBoardOptions`: the preset, the MAC and the app version. */
export function replicaBoardOptions(
  replica: ReplicaFile,
  overrides: { mac?: string } = {},
): { preset: BoardPreset; mac?: string; app: { version: string } } {
  const mac = overrides.mac ?? replica.board.mac;
  return {
    preset: replicaPreset(replica),
    ...(mac === undefined ? {} : { mac }),
    app: { version: replica.board.firmwareVersion },
  };
}
