/**
 * `tools/call` validation in the firmware's order, with its exact messages
 * (docs/protocol.md §3.3, mcp_server.cc `ParseMessage` and `DoToolCall`).
 */
import { type CJsonNode, cString, fromJsonValueShallow, getItem, toCInt } from './cjson.js';
import type { Property, PropertyValue, Tool, ToolRegistry } from './tools.js';

/** The values a tool receives, one per declared property, in declaration order. */
export type ArgumentValues = ReadonlyMap<string, PropertyValue>;

export type ArgumentsOutcome =
  | { readonly ok: true; readonly values: ArgumentValues }
  | { readonly ok: false; readonly message: string };

export type ToolCallOutcome<H> =
  | { readonly ok: true; readonly tool: Tool; readonly handler: H; readonly values: ArgumentValues }
  | { readonly ok: false; readonly message: string };

/** The firmware's validation messages. */
export const CallErrorMessage = {
  missingParams: 'Missing params',
  missingName: 'Missing name',
  invalidArguments: 'Invalid arguments',
  unknownTool: (name: string) => `Unknown tool: ${name}`,
  missingArgument: (property: string) => `Missing valid argument: ${property}`,
  belowMinimum: (min: number) => `Value is below minimum allowed: ${min}`,
  aboveMaximum: (max: number) => `Value exceeds maximum allowed: ${max}`,
} as const;

// The value a property takes from a JSON node, or undefined when the JSON type is wrong.
function readProperty(property: Property, node: CJsonNode | undefined): PropertyValue | undefined {
  switch (property.type) {
    case 'boolean':
      return node?.kind === 'bool' ? node.value : undefined;
    case 'integer':
      return node?.kind === 'number' ? toCInt(node.value) : undefined;
    case 'string':
      return node?.kind === 'string' ? cString(node.value) : undefined;
  }
}

/**
 * Checks a tool's arguments property by property in declaration order; the first
 * failure wins. A wrong type on a property with a default silently uses the default;
 * integers are truncated and saturated to int32 before the range check.
 */
export function validateArguments(tool: Tool, args: CJsonNode | undefined): ArgumentsOutcome {
  const values = new Map<string, PropertyValue>();
  const object = args?.kind === 'object' ? args : undefined;
  for (const property of tool.properties) {
    const value = readProperty(property, getItem(object, property.name));
    if (value === undefined) {
      if (property.default === undefined) {
        return { ok: false, message: CallErrorMessage.missingArgument(property.name) };
      }
      values.set(property.name, property.default);
      continue;
    }
    if (property.type === 'integer' && typeof value === 'number') {
      if (property.minimum !== undefined && value < property.minimum) {
        return { ok: false, message: CallErrorMessage.belowMinimum(property.minimum) };
      }
      if (property.maximum !== undefined && value > property.maximum) {
        return { ok: false, message: CallErrorMessage.aboveMaximum(property.maximum) };
      }
    }
    values.set(property.name, value);
  }
  return { ok: true, values };
}

/**
 * Validates `tools/call` params the way the firmware does before running anything:
 * params, name, arguments, the tool's existence, then each property.
 * `params` is the cJSON node of `params`, or a plain JS value.
 */
export function validateToolCall<H>(
  registry: ToolRegistry<H>,
  params: CJsonNode | undefined,
): ToolCallOutcome<H> {
  if (params?.kind !== 'object') return { ok: false, message: CallErrorMessage.missingParams };
  const name = getItem(params, 'name');
  if (name?.kind !== 'string') return { ok: false, message: CallErrorMessage.missingName };
  const args = getItem(params, 'arguments');
  if (args !== undefined && args.kind !== 'object') {
    return { ok: false, message: CallErrorMessage.invalidArguments };
  }
  const toolName = cString(name.value);
  const entry = registry.find(toolName);
  if (entry === undefined) return { ok: false, message: CallErrorMessage.unknownTool(toolName) };
  const outcome = validateArguments(entry.tool, args);
  if (!outcome.ok) return outcome;
  return { ok: true, tool: entry.tool, handler: entry.handler, values: outcome.values };
}

/** {@link validateArguments} for plain JS arguments, e.g. before a backend sends a call. */
export function validateArgumentValues(tool: Tool, args: unknown): ArgumentsOutcome {
  // Validation reads one level (member kinds and scalars): deeper content is never converted.
  return validateArguments(tool, args === undefined ? undefined : fromJsonValueShallow(args));
}
