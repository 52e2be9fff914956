/**
 * The firmware's tool model (mcp_server.h): properties are boolean, integer or string,
 * with an optional default and, for integers, an optional range. A tool serialises to
 * exactly the bytes the firmware puts in a `tools/list` page (docs/protocol.md §3.2).
 */
import { printCJsonNumber, printCJsonString } from './cjson.js';
import { jsonForMessage, ProtocolError } from './errors.js';

export type PropertyType = 'boolean' | 'integer' | 'string';
export type PropertyValue = boolean | number | string;

export interface BooleanProperty {
  readonly name: string;
  readonly type: 'boolean';
  readonly default?: boolean;
}
export interface IntegerProperty {
  readonly name: string;
  readonly type: 'integer';
  readonly default?: number;
  readonly minimum?: number;
  readonly maximum?: number;
}
export interface StringProperty {
  readonly name: string;
  readonly type: 'string';
  readonly default?: string;
}
export type Property = BooleanProperty | IntegerProperty | StringProperty;

export interface ToolDefinition {
  readonly name: string;
  readonly description: string;
  readonly properties?: readonly Property[];
  /** Hidden from `tools/list` unless `withUserTools` is true; still callable. */
  readonly userOnly?: boolean;
}

/** A validated tool with its firmware serialisation computed once. */
export interface Tool {
  readonly name: string;
  readonly description: string;
  readonly properties: readonly Property[];
  readonly userOnly: boolean;
  /** Exactly the JSON the firmware writes for this tool in a `tools/list` page. */
  readonly json: string;
  /** UTF-8 byte length of {@link json}: what the page budget counts. */
  readonly jsonBytes: number;
}

const INT32_MIN = -2147483648;
const INT32_MAX = 2147483647;
const utf8 = new TextEncoder();

/** UTF-8 byte length, which is what the firmware's `std::string::length()` counts. */
export function byteLength(text: string): number {
  let ascii = true;
  for (let i = 0; i < text.length; i++) {
    if (text.charCodeAt(i) > 0x7f) {
      ascii = false;
      break;
    }
  }
  return ascii ? text.length : utf8.encode(text).length;
}

/** Property constructors in the spirit of the firmware's `Property(name, type, ...)`. */
export const Prop = {
  boolean(name: string, options: { default?: boolean } = {}): BooleanProperty {
    return { name, type: 'boolean', ...options };
  },
  integer(
    name: string,
    options: { default?: number; min?: number; max?: number } = {},
  ): IntegerProperty {
    const { default: fallback, min, max } = options;
    return {
      name,
      type: 'integer',
      ...(fallback === undefined ? {} : { default: fallback }),
      ...(min === undefined ? {} : { minimum: min }),
      ...(max === undefined ? {} : { maximum: max }),
    };
  },
  string(name: string, options: { default?: string } = {}): StringProperty {
    return { name, type: 'string', ...options };
  },
} as const;

function isInt32(value: unknown): value is number {
  return (
    Number.isInteger(value) && (value as number) >= INT32_MIN && (value as number) <= INT32_MAX
  );
}

function checkProperty(tool: string, property: Property, index: number): void {
  const where = `tool ${tool}: properties[${index}]`;
  const fail = (field: string, message: string) => {
    throw new ProtocolError('INVALID_TOOL', `${where}.${field} ${message}`, {
      field: `properties[${index}].${field}`,
    });
  };
  if (typeof property.name !== 'string' || property.name === '' || property.name.includes('\0')) {
    fail('name', 'must be a non-empty string without NUL');
  }
  switch (property.type) {
    case 'boolean':
      if (property.default !== undefined && typeof property.default !== 'boolean') {
        fail('default', 'must be a boolean');
      }
      return;
    case 'string':
      if (property.default !== undefined && typeof property.default !== 'string') {
        fail('default', 'must be a string');
      }
      return;
    case 'integer': {
      const { minimum, maximum } = property;
      if ((minimum === undefined) !== (maximum === undefined)) {
        fail('minimum', 'and maximum must be given together (the firmware has no one-sided range)');
      }
      if (minimum !== undefined && !isInt32(minimum)) fail('minimum', 'must be an int32');
      if (maximum !== undefined && !isInt32(maximum)) fail('maximum', 'must be an int32');
      if (minimum !== undefined && maximum !== undefined && minimum > maximum) {
        fail('minimum', `must not exceed maximum (${minimum} > ${maximum})`);
      }
      if (property.default !== undefined) {
        if (!isInt32(property.default)) fail('default', 'must be an int32');
        // The firmware throws at registration for a default outside its range.
        if (minimum !== undefined && maximum !== undefined) {
          if (property.default < minimum || property.default > maximum) {
            fail('default', `must be between ${minimum} and ${maximum}`);
          }
        }
      }
      return;
    }
    default:
      fail(
        'type',
        `must be boolean, integer or string (got ${jsonForMessage((property as { type: unknown }).type)})`,
      );
  }
}

function propertyJson(property: Property): string {
  switch (property.type) {
    case 'boolean':
      return property.default === undefined
        ? '{"type":"boolean"}'
        : `{"type":"boolean","default":${property.default}}`;
    case 'string':
      return property.default === undefined
        ? '{"type":"string"}'
        : `{"type":"string","default":${printCJsonString(property.default)}}`;
    case 'integer': {
      let json = '{"type":"integer"';
      if (property.default !== undefined)
        json += `,"default":${printCJsonNumber(property.default)}`;
      if (property.minimum !== undefined)
        json += `,"minimum":${printCJsonNumber(property.minimum)}`;
      if (property.maximum !== undefined)
        json += `,"maximum":${printCJsonNumber(property.maximum)}`;
      return `${json}}`;
    }
  }
}

/** `McpTool::to_json()`: name, description, inputSchema (required omitted when empty), annotations. */
export function serializeTool(definition: ToolDefinition): string {
  const properties = definition.properties ?? [];
  const props = properties.map((p) => `${printCJsonString(p.name)}:${propertyJson(p)}`).join(',');
  const required = properties
    .filter((p) => p.default === undefined)
    .map((p) => printCJsonString(p.name));
  let json = `{"name":${printCJsonString(definition.name)},"description":${printCJsonString(definition.description)}`;
  json += `,"inputSchema":{"type":"object","properties":{${props}}`;
  if (required.length > 0) json += `,"required":[${required.join(',')}]`;
  json += '}';
  if (definition.userOnly === true) json += ',"annotations":{"audience":["user"]}';
  return `${json}}`;
}

/** Validates a definition against the firmware's rules and computes its serialisation. */
export function defineTool(definition: ToolDefinition): Tool {
  // Definitions also come from files (tool sets): plain JS values, checked before use.
  const { name, description } = (
    typeof definition === 'object' && definition !== null ? definition : {}
  ) as Partial<ToolDefinition>;
  if (typeof name !== 'string' || name === '' || name.includes('\0')) {
    throw new ProtocolError('INVALID_TOOL', 'tool name must be a non-empty string without NUL', {
      field: 'name',
    });
  }
  if (typeof description !== 'string') {
    throw new ProtocolError('INVALID_TOOL', `tool ${name}: description must be a string`, {
      field: 'description',
    });
  }
  if (definition.properties !== undefined && !Array.isArray(definition.properties)) {
    throw new ProtocolError('INVALID_TOOL', `tool ${name}: properties must be an array`, {
      field: 'properties',
    });
  }
  const properties = [...(definition.properties ?? [])];
  const seen = new Set<string>();
  properties.forEach((property, index) => {
    if (typeof property !== 'object' || property === null) {
      throw new ProtocolError(
        'INVALID_TOOL',
        `tool ${name}: properties[${index}] must be an object`,
        {
          field: `properties[${index}]`,
        },
      );
    }
    checkProperty(name, property, index);
    if (seen.has(property.name)) {
      throw new ProtocolError(
        'INVALID_TOOL',
        `tool ${name}: property ${property.name} is declared twice`,
        {
          field: `properties[${index}].name`,
        },
      );
    }
    seen.add(property.name);
  });
  const userOnly = definition.userOnly === true;
  const json = serializeTool({ name, description, properties, userOnly });
  return Object.freeze({
    name,
    description,
    properties: Object.freeze(properties),
    userOnly,
    json,
    jsonBytes: byteLength(json),
  });
}

/**
 * Tools in registration order, names unique (the firmware rejects duplicates).
 * `H` is whatever the owner attaches to a tool, e.g. the device's callback.
 */
export class ToolRegistry<H = undefined> {
  readonly #tools: Tool[] = [];
  readonly #byName = new Map<string, { tool: Tool; handler: H }>();

  /** Registers a tool after the ones already there. */
  add(tool: Tool | ToolDefinition, handler: H): Tool {
    const defined = 'json' in tool ? tool : defineTool(tool);
    if (this.#byName.has(defined.name)) {
      throw new ProtocolError('DUPLICATE_TOOL', `tool ${defined.name} is already registered`, {
        field: 'name',
      });
    }
    this.#tools.push(defined);
    this.#byName.set(defined.name, { tool: defined, handler });
    return defined;
  }

  /** Exact, case-sensitive lookup, as the firmware's `std::find_if` on the name. */
  find(name: string): { tool: Tool; handler: H } | undefined {
    return this.#byName.get(name);
  }

  get tools(): readonly Tool[] {
    return this.#tools;
  }

  get size(): number {
    return this.#tools.length;
  }
}
