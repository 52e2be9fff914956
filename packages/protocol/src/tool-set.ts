/**
 * Tool sets in the golden corpus's format (fixtures/corpus/README.md): what
 * `xiaozhi-mcp page --tools` reads, and what corpus replays register.
 */
import { type JsonValue, printCJson } from './cjson.js';
import { jsonForMessage, ProtocolError } from './errors.js';
import { ImageContent, type ToolReturn } from './results.js';
import { defineTool, type Property, type PropertyValue, type Tool } from './tools.js';

/** What a corpus tool's callback returns (`returns.kind`). */
export type FixtureReturn =
  | { readonly kind: 'bool'; readonly value: boolean }
  | { readonly kind: 'int'; readonly value: number }
  | { readonly kind: 'string'; readonly value: string }
  | { readonly kind: 'json'; readonly value: JsonValue }
  | { readonly kind: 'throw'; readonly value: string }
  | { readonly kind: 'image'; readonly value: string; readonly mime: string };

export interface ToolSetEntry {
  readonly tool: Tool;
  readonly returns: FixtureReturn;
  /** The tool returns a compact JSON object of the values it received. */
  readonly echoArgs: boolean;
}

type Json = Record<string, unknown>;

function fail(field: string, message: string): never {
  throw new ProtocolError('INVALID_TOOL', `${field} ${message}`, { field });
}

function readProperty(raw: unknown, field: string): Property {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
    fail(field, 'must be an object');
  const p = raw as Json;
  if (typeof p.name !== 'string') fail(`${field}.name`, 'must be a string');
  const { name } = p;
  switch (p.type) {
    case 'boolean':
      if (p.default !== undefined && typeof p.default !== 'boolean')
        fail(`${field}.default`, 'must be a boolean');
      return p.default === undefined
        ? { name, type: 'boolean' }
        : { name, type: 'boolean', default: p.default };
    case 'string':
      if (p.default !== undefined && typeof p.default !== 'string')
        fail(`${field}.default`, 'must be a string');
      return p.default === undefined
        ? { name, type: 'string' }
        : { name, type: 'string', default: p.default };
    case 'integer': {
      for (const key of ['default', 'min', 'max'] as const) {
        if (p[key] !== undefined && !Number.isInteger(p[key]))
          fail(`${field}.${key}`, 'must be an integer');
      }
      return {
        name,
        type: 'integer',
        ...(p.default === undefined ? {} : { default: p.default as number }),
        ...(p.min === undefined ? {} : { minimum: p.min as number }),
        ...(p.max === undefined ? {} : { maximum: p.max as number }),
      };
    }
    default:
      return fail(
        `${field}.type`,
        `must be boolean, integer or string (got ${jsonForMessage(p.type)})`,
      );
  }
}

function readReturns(raw: unknown, field: string): FixtureReturn {
  if (raw === undefined) return { kind: 'bool', value: true };
  if (typeof raw !== 'object' || raw === null) fail(field, 'must be an object');
  const r = raw as Json;
  switch (r.kind) {
    case 'bool':
      if (typeof r.value !== 'boolean') fail(`${field}.value`, 'must be a boolean');
      return { kind: 'bool', value: r.value };
    case 'int':
      if (!Number.isInteger(r.value)) fail(`${field}.value`, 'must be an integer');
      return { kind: 'int', value: r.value as number };
    case 'string':
    case 'throw':
      if (typeof r.value !== 'string') fail(`${field}.value`, 'must be a string');
      return { kind: r.kind, value: r.value };
    case 'json': {
      if (typeof r.value !== 'string') return { kind: 'json', value: r.value as JsonValue };
      try {
        return { kind: 'json', value: JSON.parse(r.value) as JsonValue };
      } catch (cause) {
        throw new ProtocolError('INVALID_TOOL', `${field}.value is not valid JSON`, {
          field: `${field}.value`,
          cause,
        });
      }
    }
    case 'image':
      if (typeof r.value !== 'string') fail(`${field}.value`, 'must be a string');
      return {
        kind: 'image',
        value: r.value,
        mime: typeof r.mime === 'string' ? r.mime : 'image/jpeg',
      };
    default:
      return fail(
        `${field}.kind`,
        `must be bool, int, string, json, throw or image (got ${jsonForMessage(r.kind)})`,
      );
  }
}

/**
 * Reads a tool set: a JSON array of tool definitions, or an object with a `tools`
 * array (a whole corpus case). Errors name the field, e.g. `tools[3].properties[0].max`.
 */
export function parseToolSet(input: unknown): ToolSetEntry[] {
  const list = Array.isArray(input) ? input : (input as Json | null)?.tools;
  if (!Array.isArray(list)) fail('tools', 'must be an array of tool definitions');
  const names = new Set<string>();
  return list.map((raw, index) => {
    const field = `tools[${index}]`;
    if (typeof raw !== 'object' || raw === null || Array.isArray(raw))
      fail(field, 'must be an object');
    const t = raw as Json;
    if (typeof t.name !== 'string') fail(`${field}.name`, 'must be a string');
    if (typeof t.description !== 'string') fail(`${field}.description`, 'must be a string');
    if (t.properties !== undefined && !Array.isArray(t.properties))
      fail(`${field}.properties`, 'must be an array');
    if (names.has(t.name)) {
      throw new ProtocolError('DUPLICATE_TOOL', `${field}.name ${t.name} is already registered`, {
        field: `${field}.name`,
      });
    }
    names.add(t.name);
    const properties = ((t.properties as unknown[] | undefined) ?? []).map((p, i) =>
      readProperty(p, `${field}.properties[${i}]`),
    );
    let tool: Tool;
    try {
      tool = defineTool({
        name: t.name,
        description: t.description,
        properties,
        userOnly: t.user_only === true,
      });
    } catch (error) {
      if (error instanceof ProtocolError) {
        throw new ProtocolError(error.code, `${field}: ${error.message}`, {
          field: `${field}.${error.field ?? ''}`,
          cause: error,
        });
      }
      throw error;
    }
    return {
      tool,
      returns: readReturns(t.returns, `${field}.returns`),
      echoArgs: t.echo_args === true,
    };
  });
}

function decodeBytes(text: string): Uint8Array {
  return new TextEncoder().encode(text);
}

/** What a corpus tool returns for the values it received (throws for `throw`). */
export function fixtureToolReturn(
  entry: ToolSetEntry,
  values: ReadonlyMap<string, PropertyValue>,
): ToolReturn {
  // Built from the map, not an object, so integer-like names keep declaration order.
  if (entry.echoArgs) {
    return `{${[...values].map(([name, value]) => `${printCJson(name)}:${printCJson(value)}`).join(',')}}`;
  }
  const { returns } = entry;
  switch (returns.kind) {
    case 'bool':
    case 'int':
    case 'string':
      return returns.value;
    case 'json':
      return { json: returns.value };
    case 'throw':
      throw new Error(returns.value);
    case 'image':
      return new ImageContent(returns.mime, decodeBytes(returns.value));
  }
}
