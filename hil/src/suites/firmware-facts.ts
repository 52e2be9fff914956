/**
 * What the firmware does, as `hil` holds a board to it: literals copied from docs/protocol.md
 * (xiaozhi-esp32 2.4.x), never read from the protocol core or the device SDK. The virtual
 * board is built from those packages; if a check took its expectations from them, a wrong
 * constant would move the board and its judge together and stay green. Transport (sending
 * requests, reading frames) may use the core; judging may not. `firmware-facts.test.ts` holds
 * these literals against the firmware's own recorded replies in fixtures/corpus.
 */

/** docs/protocol.md §3.1: every `initialize` reply says this; nothing is negotiated. */
export const PROTOCOL_VERSION = '2024-11-05';

/** docs/protocol.md §3.2: a page is limited to 8000 bytes of UTF-8. */
export const PAGE_BUDGET_BYTES = 8000;
/** docs/protocol.md §3.2: a tool is appended while `len(text) + len(tool + ",") + 30 <= 8000`. */
export const PAGE_SLACK_BYTES = 30;
/** docs/protocol.md §3.2: the text every page starts from. */
export const PAGE_OPENING = '{"tools":[';

/** docs/protocol.md §3.2: a cursor naming no tool gets this error (an empty name: two spaces). */
export const UNKNOWN_CURSOR_MESSAGE = 'Failed to add tool  because of payload size limit';

/** docs/protocol.md §3.3: `tools/call` validation messages, in the firmware's order. */
export const CALL_ERRORS = {
  missingParams: 'Missing params',
  missingName: 'Missing name',
  invalidArguments: 'Invalid arguments',
  unknownTool: (name: string): string => `Unknown tool: ${name}`,
  missingArgument: (property: string): string => `Missing valid argument: ${property}`,
  belowMinimum: (min: number): string => `Value is below minimum allowed: ${min}`,
  aboveMaximum: (max: number): string => `Value exceeds maximum allowed: ${max}`,
} as const;

/** docs/protocol.md §2: any method but initialize, tools/list and tools/call. */
export function methodNotImplemented(method: string): string {
  return `Method not implemented: ${method}`;
}

/** docs/protocol.md §3.2: the only property types. */
export const PROPERTY_TYPES: readonly string[] = ['boolean', 'integer', 'string'];
/** docs/protocol.md §3.2: a property schema's keys, in this order (each optional but `type`). */
export const PROPERTY_KEYS: readonly string[] = ['type', 'default', 'minimum', 'maximum'];
/** docs/protocol.md §3.2: a tool's keys, in this order (`annotations` only on user-only tools). */
export const TOOL_KEYS: readonly string[] = ['name', 'description', 'inputSchema', 'annotations'];
/** docs/protocol.md §2: the device reads numbers as a C int. */
export const INT32_MIN = -2_147_483_648;
export const INT32_MAX = 2_147_483_647;

/** docs/protocol.md §3.4: `self.audio_speaker.set_volume` takes `volume`, an integer 0..100. */
export const VOLUME_RANGE = { min: 0, max: 100 } as const;

/** docs/protocol.md §3.4: the built-in user-only tools (never in a plain listing). */
export const USER_ONLY_TOOLS: readonly string[] = [
  'self.get_system_info',
  'self.reboot',
  'self.upgrade_firmware',
  'self.screen.get_info',
  'self.screen.snapshot',
  'self.screen.preview_image',
  'self.assets.set_download_url',
];

/**
 * docs/protocol.md §3.4: tools whose reply is never delivered (the board reboots first). The
 * safe-tools sweep never calls them, whatever the inventory says.
 */
export const NEVER_SWEPT: readonly string[] = ['self.reboot', 'self.upgrade_firmware'];
