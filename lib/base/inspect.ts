/**
 * What a service sees when it logs one of the library's objects: `util.inspect()` and
 * `JSON.stringify()` show a short summary (kind, size, device, address, state), never the
 * handles and private fields behind it.
 */
import { inspect } from 'node:util';

/** @internal The parts of util.inspect's options a summary uses (no Node types in the typings). */
export interface InspectOptionsLike {
  depth?: number | null;
  stylize(text: string, style: string): string;
}
/** @internal util.inspect's shape. */
export type InspectLike = (value: unknown, options?: object) => string;

/** The key `util.inspect()` looks for. */
export const inspectCustom: unique symbol = inspect.custom as never;

/** @internal Formats `fields` as `Name { ... }`, following the caller's depth and colours. */
export function inspectSummary(
  name: string,
  fields: object,
  depth: number,
  options: InspectOptionsLike,
  insp: InspectLike = inspect,
): string {
  if (depth < 0) return options.stylize(`[${name}]`, 'special');
  return `${name} ${insp(fields, { ...options, depth: options.depth == null ? null : options.depth - 1 })}`;
}

/** @internal An address as a JSON-friendly number, or null where there is none (freed, refused). */
export function addressOrNull(read: () => number | null): number | null {
  try {
    return read();
  } catch {
    return null;
  }
}
