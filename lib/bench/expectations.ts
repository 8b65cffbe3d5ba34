/**
 * Expectation files: what a GPU model on a given link should reach, as data rather than constants
 * in code (as DCGM keeps its thresholds in a file). The package ships one per GPU the project has
 * measured or a fleet publishes figures for (`expectations/*.json`); the doctor and the benchmark
 * pick the one that matches the device (its name, its PCIe link's maximum generation and width),
 * and a user's file (`--expectations FILE`) takes their place.
 */
import * as fs from 'fs';
import * as path from 'path';
import { CudaMemoryError, invalidArgument, jsonText, textOf } from '../base/errors';
import { checkFilePath, isArray, isReadable } from '../base/validate';
import { fileProblem } from '../base/files';
import { packageRoot } from '../binding/native';
import { Gate, parseGate } from './gates';

/**
 * The figures one GPU model on one link should reach; null: no expectation (the command's own
 * default applies).
 *
 * @category Benchmarks
 */
export interface ExpectedFigures {
  /** Pinned host-to-device and device-to-host GB/s at the doctor's size (256 MiB). */
  h2dPinnedGbps: number | null;
  d2hPinnedGbps: number | null;
  /** Device-to-device GB/s, counting reads and writes. */
  d2dGbps: number | null;
  /** copy() GB/s between two GPUs. */
  p2pGbps: number | null;
  /** The most the coefficient of variation of a check's repeats may be before it is called unstable. */
  maxCv: number | null;
}

/**
 * An expectation file (`schema: "cuda-memory/expectations@1"`).
 *
 * @category Benchmarks
 */
export interface Expectations {
  schema: 'cuda-memory/expectations@1';
  /** What it is for, e.g. "H100 PCIe, Gen5 x16". */
  name: string;
  /**
   * Which devices it is for: `name`, a regular expression (case-insensitive) over the device's
   * name; `pcieMaxGeneration` and `pcieMaxWidth`, the link's maximum as NVML reports it.
   */
  match: { name?: string; pcieMaxGeneration?: number; pcieMaxWidth?: number };
  expect: ExpectedFigures;
  /** Where the figures come from. */
  notes?: string[];
  /** The file it was read from (set when read). */
  file?: string;
}

/**
 * The device fields an expectation file is matched against (as `devices()` reports them).
 *
 * @category Benchmarks
 */
export interface ExpectationTarget {
  name: string;
  pcie?: { maxGeneration: number; maxWidth: number } | null;
}

const FIGURES: (keyof ExpectedFigures)[] = ['h2dPinnedGbps', 'd2hPinnedGbps', 'd2dGbps', 'p2pGbps', 'maxCv'];
// The fields of a file, and of its match; `file` is set by the reader, never written in a file.
const FIELDS = ['schema', 'name', 'match', 'expect', 'notes'];
const MATCH_FIELDS = ['name', 'pcieMaxGeneration', 'pcieMaxWidth'];

function invalid(file: string, what: string): CudaMemoryError {
  return new CudaMemoryError(`the expectation file ${file} is not valid: ${what}`, 'ERR_EXPECTATIONS_INVALID');
}

/**
 * Checks parsed JSON as an expectation file; throws CudaMemoryError ERR_EXPECTATIONS_INVALID
 * naming the file and the field.
 *
 * @category Benchmarks
 */
export function checkExpectations(value: unknown, file: string): Expectations {
  if (typeof file !== 'string') throw invalidArgument('file', 'the name of the file (a string) for messages', file);
  return check(value, file, true);
}

// The check of expectations as the reader returned them (`withFile`: their `file` field is
// known), or of a file's JSON, where `file` is an unknown field as any other: a file does not
// name itself.
function check(value: unknown, file: string, withFile: boolean): Expectations {
  if (value === null || typeof value !== 'object' || !isReadable(value) || Array.isArray(value))
    throw invalid(file, 'expected a JSON object');
  const v = value as Record<keyof Expectations, unknown>;
  if (v.schema !== 'cuda-memory/expectations@1')
    throw invalid(file, `expected schema "cuda-memory/expectations@1", got ${jsonText(v.schema)}`);
  refuseUnknown(file, '', Object.keys(v), withFile ? [...FIELDS, 'file'] : FIELDS);
  const name = v.name;
  if (typeof name !== 'string' || !name) throw invalid(file, 'expected a name');
  const m = objectField(file, 'match', v.match) as Expectations['match'];
  refuseUnknown(file, 'match.', Object.keys(m), MATCH_FIELDS);
  const pattern = m.name;
  if (pattern !== undefined) {
    if (typeof pattern !== 'string') throw invalid(file, 'expected match.name to be a regular expression in a string');
    try {
      new RegExp(pattern, 'i');
    } catch (e) {
      throw invalid(file, `match.name is not a regular expression: ${(e as Error).message}`);
    }
  }
  const match: Expectations['match'] = pattern === undefined ? {} : { name: pattern };
  for (const k of ['pcieMaxGeneration', 'pcieMaxWidth'] as const) {
    const x = m[k];
    if (x === undefined) continue;
    if (!Number.isInteger(x) || x < 1) throw invalid(file, `expected match.${k} to be a positive integer, got ${jsonText(x)}`);
    match[k] = x;
  }
  const e = objectField(file, 'expect', v.expect) as Partial<Record<keyof ExpectedFigures, unknown>>;
  refuseUnknown(file, 'expect.', Object.keys(e), FIGURES);
  const expect = {} as ExpectedFigures;
  for (const k of FIGURES) {
    const x = e[k];
    if (x !== undefined && x !== null && (typeof x !== 'number' || !Number.isFinite(x) || x <= 0))
      throw invalid(file, `expected expect.${k} to be a positive number or null, got ${jsonText(x)}`);
    expect[k] = (x as number | null | undefined) ?? null;
  }
  if (v.notes !== undefined && !isArray(v.notes)) throw invalid(file, `expected notes to be an array, got ${jsonText(v.notes)}`);
  const notes = isArray(v.notes) ? [...v.notes].map(textOf) : undefined;
  return { schema: 'cuda-memory/expectations@1', name, match, expect, notes, file };
}

// Refuses the fields of an object that are not among `known`, naming them as `prefix` + key
// (a misspelt field would otherwise leave its check to the default without a word).
function refuseUnknown(file: string, prefix: string, keys: string[], known: readonly string[]): void {
  const unknown = keys.filter((k) => !known.includes(k));
  if (unknown.length)
    throw invalid(
      file,
      `unknown field${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => prefix + jsonKey(k)).join(', ')} (known: ${known.join(', ')})`,
    );
}

// A field's name as written in the message: plain where it is a plain word, else quoted as JSON
// (a name with control characters reaches a terminal).
const jsonKey = (k: string): string => (/^[A-Za-z_$][\w$]*$/.test(k) ? k : JSON.stringify(k));

// An object field of an expectation file (absent: empty).
function objectField(file: string, key: string, value: unknown): Record<string, unknown> {
  if (value === undefined) return {};
  if (value === null || typeof value !== 'object' || !isReadable(value) || Array.isArray(value))
    throw invalid(file, `expected ${key} to be an object, got ${jsonText(value)}`);
  return value as Record<string, unknown>;
}

// Expectations given to a function: what readExpectations or checkExpectations returned (checked
// again, so that a hand-made one is refused as a file would be).
function checkGiven(name: string, value: unknown): Expectations {
  if (value === null || typeof value !== 'object' || !isReadable(value) || Array.isArray(value))
    throw invalidArgument(name, 'expectations (as readExpectations returns them)', value);
  const file = (value as { file?: unknown }).file;
  return check(value, typeof file === 'string' ? file : `(argument ${name})`, true);
}

// The device fields matched against, read once and checked.
function checkTarget(value: unknown): ExpectationTarget {
  if (value === null || typeof value !== 'object' || !isReadable(value))
    throw invalidArgument('d', 'a device (as devices() lists it: name, pcie)', value);
  const { name, pcie } = value as Record<keyof ExpectationTarget, unknown>;
  if (typeof name !== 'string') throw invalidArgument('d.name', "the device's name (a string)", name);
  if (pcie === undefined || pcie === null) return { name, pcie: null };
  if (typeof pcie !== 'object' || !isReadable(pcie))
    throw invalidArgument('d.pcie', 'the PCIe link (maxGeneration, maxWidth) or null', pcie);
  const { maxGeneration, maxWidth } = pcie as Record<string, unknown>;
  if (typeof maxGeneration !== 'number') throw invalidArgument('d.pcie.maxGeneration', 'a number', maxGeneration);
  if (typeof maxWidth !== 'number') throw invalidArgument('d.pcie.maxWidth', 'a number', maxWidth);
  return { name, pcie: { maxGeneration, maxWidth } };
}

/**
 * Reads an expectation file.
 *
 * @category Benchmarks
 */
export function readExpectations(file: string): Expectations {
  checkFilePath('file', file);
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new CudaMemoryError(fileProblem(e, 'read the expectation file', file), 'ERR_EXPECTATIONS_INVALID');
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw invalid(file, 'it is not JSON');
  }
  return check(parsed, file, false);
}

/** The folder of the shipped expectation files. */
export const EXPECTATIONS_DIR = path.join(packageRoot, 'expectations');

/**
 * The expectation files the package ships, sorted by file name.
 *
 * @category Benchmarks
 */
export function shippedExpectations(dir = EXPECTATIONS_DIR): Expectations[] {
  let names: string[] = [];
  try {
    names = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
  } catch {
    return [];
  }
  return names.sort().map((f) => readExpectations(path.join(dir, f)));
}

/**
 * Whether an expectation file is for this device: its name matches and, where the file names a
 * link, the device's link reaches that maximum generation and width.
 *
 * @category Benchmarks
 */
export function expectationsMatch(e: Expectations, d: ExpectationTarget): boolean {
  return matches(checkGiven('e', e), checkTarget(d));
}

function matches(e: Expectations, d: ExpectationTarget): boolean {
  if (e.match.name !== undefined && !new RegExp(e.match.name, 'i').test(d.name)) return false;
  if (e.match.pcieMaxGeneration !== undefined && d.pcie?.maxGeneration !== e.match.pcieMaxGeneration) return false;
  if (e.match.pcieMaxWidth !== undefined && d.pcie?.maxWidth !== e.match.pcieMaxWidth) return false;
  return true;
}

/**
 * The expectations for a device: the user's file when given (whatever the device), else the first
 * shipped file that matches it, else null.
 *
 * @category Benchmarks
 */
export function expectationsFor(d: ExpectationTarget, userFile?: string, list?: Expectations[]): Expectations | null {
  const target = checkTarget(d);
  if (userFile !== undefined) return readExpectations(checkFilePath('userFile', userFile));
  if (list !== undefined && !isArray(list)) throw invalidArgument('list', 'an array of expectations', list);
  const given = list === undefined ? shippedExpectations() : [...list].map((e, i) => checkGiven(`list[${i}]`, e));
  return given.find((e) => matches(e, target)) ?? null;
}

/**
 * The benchmark's gates for an expectation file: pinned h2d and d2h, and device-to-device traffic
 * (reads plus writes), each at the benchmark's headline size; a null figure gives no gate.
 *
 * @category Benchmarks
 */
export function expectationGates(e: Expectations): Gate[] {
  const x = checkGiven('e', e).expect;
  const out: string[] = [];
  if (x.h2dPinnedGbps !== null) out.push(`h2d.pinned>=${x.h2dPinnedGbps}GB/s`);
  if (x.d2hPinnedGbps !== null) out.push(`d2h.pinned>=${x.d2hPinnedGbps}GB/s`);
  if (x.d2dGbps !== null) out.push(`d2d.traffic>=${x.d2dGbps}GB/s`);
  return out.map(parseGate);
}
