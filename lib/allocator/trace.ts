/**
 * Allocator traces (`cuda-memory/trace@1`): what a recording allocator writes, and what replay
 * and the memory page read, PyTorch's `torch.cuda.memory._snapshot()` files included.
 */
import * as fs from 'fs';
import { constants as bufferConstants } from 'buffer';
import { CudaMemoryError, jsonText } from '../base/errors';
import { BoundedRead, fileProblem, readBounded } from '../base/files';
import { formatBytes } from '../base/units';
import { checkDevice, checkFilePath, isArray, isReadable } from '../base/validate';
import type { GroupMember, GroupStats } from '../base/types';

/**
 * The largest trace file {@link loadTrace} reads: 512 MiB, about the longest string JavaScript
 * holds (a larger file could not be parsed, and reading it whole would only use up memory).
 *
 * @category Allocators
 */
export const TRACE_MAX_BYTES = 512 * 2 ** 20;

/**
 * One event of a trace. Only `action` and, for alloc/free, `id` (and `bytes` for alloc) are required.
 *
 * @category Allocators
 */
export interface TraceEvent {
  action: 'alloc' | 'free' | 'oom' | 'region_alloc' | 'region_free' | 'empty_cache';
  /** The block (alloc, free): a number or string unique among live blocks. */
  id?: number | string;
  /** alloc, oom: bytes requested; free: the block's request. */
  bytes?: number;
  /** alloc, free: the block's size (the request rounded, or a whole unsplit block); oom: the
   *  rounded request; region events: the region's size; empty_cache: bytes released. */
  size?: number;
  /** Microseconds since recording started. */
  time?: number;
  /** The region's address (alloc, free, region events). */
  region?: number;
  /** The block's offset in its region (alloc, free); for the region events of an expandable
   *  segment, where in the segment the mapping or unmapping lies. */
  offset?: number;
  /** The JavaScript stack of the allocation, when recorded with `stacks: true`. */
  stack?: string;
}

/**
 * A trace: a recording allocator's `trace()`, or a file any tool can write.
 *
 * @category Allocators
 */
export interface Trace {
  schema: 'cuda-memory/trace@1';
  events: TraceEvent[];
  /** Where it was recorded. */
  device?: { index: number; simulated: boolean; totalBytes: number; computeCapability: string };
  /** The recording allocator's policy. */
  policy?: {
    backend: 'bfc';
    allowGrowth: boolean;
    limitBytes: number;
    limitSource: string;
    garbageCollection: boolean;
    /** Recorded in one expandable segment: its region events are the mappings at its end. */
    expandableSegments?: boolean;
  };
  /** Events not kept because maxEvents was reached. */
  droppedEvents?: number;
  /** What the trace was read from, for a PyTorch file ("pytorch _snapshot(), device 0"). */
  source?: string;
  /** The group budget the recording allocator charges, as it was when the trace was taken. */
  group?: TraceGroup;
}

/**
 * A group as a trace keeps it ({@link Trace.group}): the figures of {@link GroupStats} that say its
 * budget and waits, taken when the trace was, and for each member what it is guaranteed, may hold,
 * holds, and waits for.
 *
 * @category Allocators
 */
export interface TraceGroup extends Pick<
  GroupStats,
  'name' | 'budgetBytes' | 'budgetSource' | 'chargedBytes' | 'reservedBytes' | 'waits' | 'waitsGranted' | 'waitMsTotal'
> {
  /** When the trace was taken (ms since the epoch): what the members' waits are measured to. */
  at: number;
  members: TraceGroupMember[];
}

/**
 * One member of a {@link TraceGroup}: the figures of {@link GroupMember} the memory page shows.
 *
 * @category Allocators
 */
export type TraceGroupMember = Pick<
  GroupMember,
  'pid' | 'self' | 'requestBytes' | 'memberLimitBytes' | 'poolBytes' | 'bytesInUse' | 'waitingBytes' | 'waitingSince'
>;

/**
 * A trace file or object that cannot be read; `eventIndex` says where, when it is one event.
 *
 * @category Allocators
 */
export class TraceError extends CudaMemoryError {
  /** @internal */
  constructor(
    message: string,
    readonly eventIndex: number | null = null,
  ) {
    super(message, 'ERR_BAD_TRACE');
    this.name = 'TraceError';
  }
}

const ACTIONS = new Set(['alloc', 'free', 'oom', 'region_alloc', 'region_free', 'empty_cache']);

function isSize(v: unknown, min = 1): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= min;
}

/**
 * Checks a trace of ours (full or minimal) and returns it with its events checked: every event
 * an object with a known action; an alloc with a positive safe-integer `bytes` and an `id` not
 * live already; a free naming a live id. Throws TraceError naming the first bad event's index.
 *
 * @category Allocators
 */
export function checkTrace(t: unknown): Trace {
  if (typeof t !== 'object' || t === null || !isReadable(t) || Array.isArray(t)) throw new TraceError('a trace must be a JSON object');
  const o = t as Record<string, unknown>;
  if (o.schema !== 'cuda-memory/trace@1')
    throw new TraceError(`expected schema "cuda-memory/trace@1" but found ${jsonText(o.schema)} (PyTorch files have device_traces)`);
  if (!Array.isArray(o.events)) throw new TraceError('a trace needs an events array');
  const live = new Set<number | string>();
  o.events.forEach((e: unknown, i: number) => {
    const at = (msg: string) => new TraceError(`event ${i}: ${msg}`, i);
    if (typeof e !== 'object' || e === null) throw at('not an object');
    const ev = e as TraceEvent;
    if (!ACTIONS.has(ev.action)) throw at(`unknown action ${jsonText(ev.action)}; expected one of ${[...ACTIONS].join(', ')}`);
    if (ev.action === 'alloc' || ev.action === 'free') {
      if (typeof ev.id !== 'number' && typeof ev.id !== 'string') throw at(`${ev.action} needs an id (a number or a string)`);
    }
    if (ev.action === 'alloc') {
      if (!isSize(ev.bytes)) throw at(`alloc needs bytes, a positive safe integer; got ${jsonText(ev.bytes)}`);
      if (live.has(ev.id!)) throw at(`alloc of id ${jsonText(ev.id)}, which is already live`);
      live.add(ev.id!);
    } else if (ev.action === 'free') {
      if (!live.has(ev.id!)) throw at(`free of id ${jsonText(ev.id)}, which was never allocated or is already freed`);
      live.delete(ev.id!);
    }
    for (const k of ['bytes', 'size', 'region', 'offset'] as const)
      if (ev[k] !== undefined && !isSize(ev[k], 0)) throw at(`${k} must be a non-negative safe integer; got ${jsonText(ev[k])}`);
    if (ev.time !== undefined && (typeof ev.time !== 'number' || !Number.isFinite(ev.time) || ev.time < 0))
      throw at(`time must be a non-negative number of microseconds; got ${jsonText(ev.time)}`);
  });
  if (o.group !== undefined) checkTraceGroup(o.group);
  return o as unknown as Trace;
}

/** @internal A group's stats as a trace keeps them, taken now. */
export function traceGroup(g: GroupStats): TraceGroup {
  return {
    name: g.name,
    at: Date.now(),
    budgetBytes: g.budgetBytes,
    budgetSource: g.budgetSource,
    chargedBytes: g.chargedBytes,
    reservedBytes: g.reservedBytes,
    waits: g.waits,
    waitsGranted: g.waitsGranted,
    waitMsTotal: g.waitMsTotal,
    members: g.members.map((m) => ({
      pid: m.pid,
      self: m.self,
      requestBytes: m.requestBytes,
      memberLimitBytes: m.memberLimitBytes,
      poolBytes: m.poolBytes,
      bytesInUse: m.bytesInUse,
      waitingBytes: m.waitingBytes,
      waitingSince: m.waitingSince,
    })),
  };
}

// A trace's group: the figures the memory page prints, each a non-negative safe integer.
function checkTraceGroup(g: unknown): void {
  const bad = (msg: string) => new TraceError(`group: ${msg}`);
  if (typeof g !== 'object' || g === null || Array.isArray(g)) throw bad('not an object');
  const o = g as Record<string, unknown>;
  if (typeof o.name !== 'string' || typeof o.budgetSource !== 'string') throw bad('needs a name and a budgetSource, strings');
  for (const k of ['at', 'budgetBytes', 'chargedBytes', 'reservedBytes', 'waits', 'waitsGranted', 'waitMsTotal'])
    if (!isSize(o[k], 0)) throw bad(`${k} must be a non-negative safe integer; got ${jsonText(o[k])}`);
  if (!Array.isArray(o.members)) throw bad('needs a members array');
  o.members.forEach((m: unknown, i: number) => {
    if (typeof m !== 'object' || m === null) throw bad(`member ${i}: not an object`);
    const r = m as Record<string, unknown>;
    for (const k of ['pid', 'requestBytes', 'memberLimitBytes', 'poolBytes', 'bytesInUse', 'waitingBytes'])
      if (!isSize(r[k], 0)) throw bad(`member ${i}: ${k} must be a non-negative safe integer; got ${jsonText(r[k])}`);
    if (r.waitingSince !== null && !isSize(r.waitingSince, 0))
      throw bad(`member ${i}: waitingSince must be null or ms since the epoch; got ${jsonText(r.waitingSince)}`);
    if (typeof r.self !== 'boolean') throw bad(`member ${i}: self must be a boolean`);
  });
}

interface TorchTraceEntry {
  action: string;
  addr: number;
  size: number;
  stream?: number;
  time_us?: number;
  frames?: { filename: string; line: number; name: string }[];
}

/**
 * Converts a file written with `json.dump(torch.cuda.memory._snapshot(), f)` after
 * `torch.cuda.memory._record_memory_history()`: the events of one device's `device_traces`,
 * `alloc` and `free_completed` (or `free_requested`, where no free completed) becoming alloc and
 * free, `segment_alloc`/`segment_free` region events, `oom` an oom. Blocks are keyed by address
 * while live, so a reused address is a new block.
 *
 * @category Allocators
 */
export function fromPyTorchSnapshot(snapshot: unknown, device?: number): Trace {
  if (snapshot === null || typeof snapshot !== 'object' || !isReadable(snapshot))
    throw new TraceError('not a PyTorch snapshot: expected the object torch.cuda.memory._snapshot() returns');
  if (device !== undefined) checkDevice(device);
  const s = snapshot as { device_traces?: unknown; segments?: { device?: number; total_size?: number }[] };
  if (!isArray(s.device_traces)) throw new TraceError('not a PyTorch snapshot: no device_traces array');
  const traces = s.device_traces as TorchTraceEntry[][];
  const index = device ?? traces.reduce((best, t, i) => ((t?.length ?? 0) > (traces[best]?.length ?? 0) ? i : best), 0);
  const entries = traces[index];
  if (!isArray(entries)) throw new TraceError(`the PyTorch snapshot has no trace for device ${index}`);
  const completes = entries.some((e) => e?.action === 'free_completed');
  const freeAction = completes ? 'free_completed' : 'free_requested';
  const checked = new Set(['alloc', freeAction, 'segment_alloc', 'segment_free', 'oom']);
  const live = new Map<number, number>();
  const events: TraceEvent[] = [];
  const t0 = entries.find((e) => typeof e?.time_us === 'number')?.time_us ?? 0;
  let next = 1;
  entries.forEach((e, i) => {
    if (typeof e !== 'object' || e === null || typeof e.action !== 'string')
      throw new TraceError(`PyTorch event ${i}: not an object with an action`, i);
    const time = typeof e.time_us === 'number' ? e.time_us - t0 : undefined;
    const stack = e.frames?.length ? e.frames.map((f) => `${f.name} (${f.filename}:${f.line})`).join('\n') : undefined;
    if (checked.has(e.action)) {
      if (!isSize(e.size, e.action === 'oom' ? 0 : 1))
        throw new TraceError(`PyTorch event ${i}: ${e.action} of ${jsonText(e.size)} bytes`, i);
      if (e.action !== 'oom' && !isSize(e.addr, 0))
        throw new TraceError(`PyTorch event ${i}: ${e.action} at address ${jsonText(e.addr)}, not a non-negative safe integer`, i);
    }
    if (e.action === 'alloc') {
      const id = next++;
      live.set(e.addr, id);
      events.push({ action: 'alloc', id, bytes: e.size, time, ...(stack ? { stack } : {}) });
    } else if (e.action === freeAction) {
      const id = live.get(e.addr);
      if (id === undefined) return; // allocated before recording began
      live.delete(e.addr);
      events.push({ action: 'free', id, time });
    } else if (e.action === 'segment_alloc' || e.action === 'segment_free') {
      events.push({ action: e.action === 'segment_alloc' ? 'region_alloc' : 'region_free', region: e.addr, size: e.size, time });
    } else if (e.action === 'oom') {
      events.push({ action: 'oom', bytes: e.size, time });
    }
  });
  return { schema: 'cuda-memory/trace@1', events, source: `pytorch _snapshot(), device ${index}` };
}

/**
 * Reads a trace: a path to a JSON file, or the parsed object; ours or PyTorch's. Throws
 * TraceError with the reason (and the event index where one event is at fault).
 *
 * @category Allocators
 */
export function loadTrace(input: string | object, options: { device?: number } = {}): Trace {
  if (typeof input !== 'string' && (typeof input !== 'object' || input === null || !isReadable(input)))
    throw new TraceError(
      `a trace must be a file path, a trace object or a PyTorch snapshot; got ${input === null ? 'null' : typeof input}`,
    );
  let data: unknown = input;
  if (typeof input === 'string') {
    let read: BoundedRead;
    try {
      read = readBounded(input, TRACE_MAX_BYTES, (head, size) => {
        // A binary file (a pickle from torch.cuda.memory._dump_snapshot, say) is described, never
        // echoed into the terminal.
        if (head.includes(0) || head.some((b) => b < 0x09 || (b > 0x0d && b < 0x20)))
          throw new TraceError(
            `${input} is a binary file (${size === null ? 'not a regular file' : `${size} bytes`}, starting ${[...head.subarray(0, 4)].map((b) => '0x' + b.toString(16).padStart(2, '0')).join(' ')}), not JSON: ` +
              'a trace is cuda-memory/trace@1 JSON or a PyTorch snapshot converted to JSON (scripts/pytorch-trace.py converts a pickle)',
          );
      });
    } catch (e) {
      if (e instanceof TraceError) throw e;
      throw new TraceError(fileProblem(e, 'read', input));
    }
    if (!read.ok || read.bytes.length > bufferConstants.MAX_STRING_LENGTH)
      throw new TraceError(
        `${input} is ${!read.ok && read.size !== null ? `${formatBytes(read.size)}, ` : ''}more than a trace file may hold: traces are read up to ${formatBytes(TRACE_MAX_BYTES)}, the longest text JavaScript parses`,
      );
    const bytes = read.bytes;
    try {
      data = JSON.parse(bytes.toString('utf8'));
    } catch (e) {
      // The position only: the parser's message quotes the text around it.
      const where = /position (\d+)/.exec((e as Error).message);
      throw new TraceError(
        `${input} is not valid JSON (${where ? `at byte ${where[1]}` : 'it ends early or holds a stray character'}); was the file cut short?`,
      );
    }
  }
  if (data && typeof data === 'object' && 'device_traces' in data) return checkTrace(fromPyTorchSnapshot(data, options.device));
  return checkTrace(data);
}

/**
 * Writes a trace as JSON.
 *
 * @category Allocators
 */
export function saveTrace(file: string, trace: Trace): void {
  const path = checkFilePath('file', file);
  if (typeof trace !== 'object' || trace === null || Array.isArray(trace)) throw new TraceError('a trace must be an object');
  let text: string;
  try {
    text = JSON.stringify(trace);
  } catch (e) {
    throw new TraceError(`the trace cannot be written as JSON: ${(e as Error).message}`);
  }
  fs.writeFileSync(path, text + '\n');
}
