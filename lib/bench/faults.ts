/**
 * Why a rate check failed, named from what the run saw: a stable fault code for each likely
 * cause, for fleets that route a failed runner by code. Pure: it reads an observation (the
 * source's memory kind, the PCIe link, NUMA nodes, NVML's processes and clock reasons, the
 * repeats' spread), so its tests feed it NVML's answers instead of a GPU.
 */
import { invalidArgument } from '../base/errors';
import type { NvmlDeviceState } from '../base/types';
import { checkObjects, isArray, isReadable } from '../base/validate';

/**
 * The fault codes, stable across versions:
 * - `CM_FAULT_PAGEABLE_SOURCE`: the host side was pageable memory, which the driver stages through
 *   its own small pinned buffer;
 * - `CM_FAULT_PCIE_DEGRADED`: the PCIe link runs below its maximum generation or width;
 * - `CM_FAULT_REMOTE_NUMA`: the host buffer is on another NUMA node than the GPU;
 * - `CM_FAULT_GPU_SHARED`: another process has a context on the GPU;
 * - `CM_FAULT_CLOCKS_THROTTLED`: NVML reports the clocks held down (power cap, thermal or hardware
 *   slowdown, power brake, an applications-clocks setting) or the memory clock below its maximum;
 * - `CM_FAULT_UNSTABLE`: the repeats spread more than the expected coefficient of variation;
 * - `CM_FAULT_BELOW_EXPECTATION`: below the expectation, and none of the causes above was seen.
 *
 * @category Benchmarks
 */
export type FaultCode =
  | 'CM_FAULT_PAGEABLE_SOURCE'
  | 'CM_FAULT_PCIE_DEGRADED'
  | 'CM_FAULT_REMOTE_NUMA'
  | 'CM_FAULT_GPU_SHARED'
  | 'CM_FAULT_CLOCKS_THROTTLED'
  | 'CM_FAULT_UNSTABLE'
  | 'CM_FAULT_BELOW_EXPECTATION';

/**
 * A likely cause of a failed check: its code and what the run saw.
 *
 * @category Benchmarks
 */
export interface Fault {
  code: FaultCode;
  cause: string;
}

/**
 * The clocks when a check ran, from NVML: current and maximum SM and memory clocks (MHz) and the
 * reasons they are held down, named (`reasons`) and as NVML's bit mask (`eventReasons`).
 *
 * @category Benchmarks
 */
export interface ClockState {
  smClockMHz: number | null;
  smClockMaxMHz: number | null;
  memoryClockMHz: number | null;
  memoryClockMaxMHz: number | null;
  eventReasons: number | null;
  reasons: string[];
}

/**
 * What a rate check saw, for {@link faultsFor}. `path`: `host` for copies between host memory and
 * the GPU (the link, the host memory and its node matter), `device` for copies within a GPU,
 * `peer` between GPUs.
 *
 * @category Benchmarks
 */
export interface RunObservation {
  path: 'host' | 'device' | 'peer';
  /** The host side's memory (host path). */
  hostMemory?: 'pinned' | 'pageable' | 'registered' | 'staged';
  /** The coefficient of variation over the repeats, and the most the expectation allows. */
  cv?: number;
  maxCv?: number;
  pcie?: { currentGeneration: number; maxGeneration: number; currentWidth: number; maxWidth: number } | null;
  /** The host buffer's NUMA node and the GPU's (-1 or absent: unknown). */
  bufferNumaNode?: number;
  gpuNumaNode?: number;
  /** NVML's processes on the GPU (with this one, where NVML lists it), and this process's pid. */
  processes?: { pid: number; usedBytes: number | null }[] | null;
  pid?: number;
  clocks?: ClockState | null;
}

// nvmlClocksEventReason* bits (nvml.h). Idle, sync boost and the display clock setting hold no
// copy back; the others do.
const REASONS: [number, string, boolean][] = [
  [0x1, 'GPU idle', false],
  [0x2, 'applications clocks setting', true],
  [0x4, 'software power cap', true],
  [0x8, 'hardware slowdown', true],
  [0x10, 'sync boost', false],
  [0x20, 'software thermal slowdown', true],
  [0x40, 'hardware thermal slowdown', true],
  [0x80, 'hardware power brake slowdown', true],
  [0x100, 'display clock setting', false],
];

/**
 * The clock state from NVML's answer (null: NVML did not answer).
 *
 * @category Benchmarks
 */
export function clockState(nvml: NvmlDeviceState | null): ClockState | null {
  if (nvml === null || nvml === undefined) return null;
  const n = fields('nvml', "NVML's answer (as nvmlState gives it) or null", nvml);
  const bits = figure('nvml.clocksEventReasons', n.clocksEventReasons, true);
  return {
    smClockMHz: figure('nvml.smClockMHz', n.smClockMHz),
    smClockMaxMHz: figure('nvml.smClockMaxMHz', n.smClockMaxMHz),
    memoryClockMHz: figure('nvml.memoryClockMHz', n.memoryClockMHz),
    memoryClockMaxMHz: figure('nvml.memoryClockMaxMHz', n.memoryClockMaxMHz),
    eventReasons: bits,
    reasons: bits === null ? [] : REASONS.filter(([bit]) => bits & bit).map(([, name]) => name),
  };
}

// An object argument or field whose fields are read (a revoked proxy is refused).
function fields(name: string, expected: string, value: unknown): Record<string, unknown> {
  if (value === null || typeof value !== 'object' || !isReadable(value) || isArray(value)) throw invalidArgument(name, expected, value);
  return value as Record<string, unknown>;
}

// A figure NVML may not give: a non-negative number (an integer for a bit mask), or null (or absent).
function figure(name: string, value: unknown, integer = false): number | null {
  if (value === null || value === undefined) return null;
  if (typeof value !== 'number' || !(value >= 0) || !Number.isFinite(value) || (integer && !Number.isSafeInteger(value)))
    throw invalidArgument(
      name,
      `a non-negative ${integer ? 'integer' : 'number'} or null`,
      value,
      typeof value === 'number' ? RangeError : TypeError,
    );
  return value;
}

// A number of an observation; an optional one may be undefined (not seen). A measure that is not an
// integer may be NaN (not measured: one repeat), which no comparison passes.
function optionalNumber(name: string, value: unknown, integer: boolean, optional = true): number | undefined {
  if (value === undefined && optional) return undefined;
  if (typeof value !== 'number' || (integer && !Number.isSafeInteger(value)))
    throw invalidArgument(
      name,
      `${integer ? 'an integer' : 'a number'}${optional ? ' or undefined' : ''}`,
      value,
      typeof value === 'number' ? RangeError : TypeError,
    );
  return value;
}

function oneOf<T extends string>(name: string, value: unknown, allowed: readonly T[], optional: boolean): T | undefined {
  if (value === undefined && optional) return undefined;
  if (!allowed.includes(value as T)) throw invalidArgument(name, `one of ${allowed.join(', ')}`, value);
  return value as T;
}

/** The observation as a plain object of checked fields, each read once. */
function checkObservation(value: unknown): RunObservation {
  const o = fields('o', 'what the run saw (path, hostMemory, cv, pcie, processes, clocks, ...)', value);
  const out: RunObservation = { path: oneOf('o.path', o.path, ['host', 'device', 'peer'] as const, false)! };
  out.hostMemory = oneOf('o.hostMemory', o.hostMemory, ['pinned', 'pageable', 'registered', 'staged'] as const, true);
  out.cv = optionalNumber('o.cv', o.cv, false);
  out.maxCv = optionalNumber('o.maxCv', o.maxCv, false);
  out.bufferNumaNode = optionalNumber('o.bufferNumaNode', o.bufferNumaNode, true);
  out.gpuNumaNode = optionalNumber('o.gpuNumaNode', o.gpuNumaNode, true);
  out.pid = optionalNumber('o.pid', o.pid, true);
  if (o.pcie !== undefined && o.pcie !== null) {
    const l = fields('o.pcie', 'the PCIe link (current and maximum generation and width) or null', o.pcie);
    const [currentGeneration, maxGeneration, currentWidth, maxWidth] = (
      ['currentGeneration', 'maxGeneration', 'currentWidth', 'maxWidth'] as const
    ).map((k) => optionalNumber(`o.pcie.${k}`, l[k], true, false)!);
    out.pcie = { currentGeneration, maxGeneration, currentWidth, maxWidth };
  }
  if (o.processes !== undefined && o.processes !== null)
    out.processes = checkObjects('o.processes', "NVML's processes on the GPU", o.processes).map((p, i) => {
      const { pid, usedBytes } = p as Record<string, unknown>;
      return {
        pid: optionalNumber(`o.processes[${i}].pid`, pid, true, false)!,
        usedBytes: figure(`o.processes[${i}].usedBytes`, usedBytes ?? null),
      };
    });
  if (o.clocks !== undefined && o.clocks !== null) {
    const c = fields('o.clocks', 'the clock state (as clockState makes it) or null', o.clocks);
    const eventReasons = figure('o.clocks.eventReasons', c.eventReasons, true);
    out.clocks = {
      smClockMHz: figure('o.clocks.smClockMHz', c.smClockMHz),
      smClockMaxMHz: figure('o.clocks.smClockMaxMHz', c.smClockMaxMHz),
      memoryClockMHz: figure('o.clocks.memoryClockMHz', c.memoryClockMHz),
      memoryClockMaxMHz: figure('o.clocks.memoryClockMaxMHz', c.memoryClockMaxMHz),
      eventReasons,
      reasons: [],
    };
  }
  return out;
}

// The clocks hold a copy back: a limiting reason, or the memory clock below its maximum.
function throttled(c: ClockState): string | null {
  const limiting = c.eventReasons === null ? [] : REASONS.filter(([bit, , limits]) => limits && c.eventReasons! & bit).map(([, n]) => n);
  if (limiting.length) return `NVML reports the clocks held down: ${limiting.join(', ')} (SM ${c.smClockMHz} of ${c.smClockMaxMHz} MHz)`;
  if (c.memoryClockMHz !== null && c.memoryClockMaxMHz !== null && c.memoryClockMHz < c.memoryClockMaxMHz)
    return `the memory clock runs at ${c.memoryClockMHz} of its ${c.memoryClockMaxMHz} MHz`;
  return null;
}

// The other processes on the GPU. Where NVML does not list this process (a container's own pid
// namespace), one of the listed ones is taken to be this one.
function others(o: RunObservation): { pid: number; usedBytes: number | null }[] {
  const list = o.processes ?? [];
  const mine = list.some((p) => p.pid === o.pid);
  const rest = list.filter((p) => p.pid !== o.pid);
  return mine ? rest : rest.slice(1);
}

/**
 * The likely causes of a failed rate check, from what the run saw; empty when none was seen (the
 * caller then reports `CM_FAULT_BELOW_EXPECTATION`).
 *
 * @category Benchmarks
 */
export function faultsFor(o: RunObservation): Fault[] {
  return seenFaults(checkObservation(o));
}

function seenFaults(o: RunObservation): Fault[] {
  const out: Fault[] = [];
  const host = o.path === 'host';
  if (host && o.hostMemory === 'pageable')
    out.push({
      code: 'CM_FAULT_PAGEABLE_SOURCE',
      cause:
        'the host buffer is pageable memory, which CUDA copies through a small pinned buffer of its own: pin it (PinnedBuffer, registerHost) or use the staged path',
    });
  const l = o.pcie;
  if (host && l && (l.currentGeneration < l.maxGeneration || l.currentWidth < l.maxWidth))
    out.push({
      code: 'CM_FAULT_PCIE_DEGRADED',
      cause: `the PCIe link runs at Gen${l.currentGeneration} x${l.currentWidth} of its maximum Gen${l.maxGeneration} x${l.maxWidth} (a riser, slot or BIOS setting, or a link that trained down)`,
    });
  if (host && o.bufferNumaNode !== undefined && o.gpuNumaNode !== undefined && o.bufferNumaNode >= 0 && o.gpuNumaNode >= 0)
    if (o.bufferNumaNode !== o.gpuNumaNode)
      out.push({
        code: 'CM_FAULT_REMOTE_NUMA',
        cause: `the host buffer is on NUMA node ${o.bufferNumaNode} and the GPU on node ${o.gpuNumaNode}: the copy crosses the socket link (run on the GPU's node: numactl --cpunodebind=${o.gpuNumaNode} --membind=${o.gpuNumaNode})`,
      });
  const rest = others(o);
  if (rest.length)
    out.push({
      code: 'CM_FAULT_GPU_SHARED',
      cause: `${rest.length} other process${rest.length === 1 ? '' : 'es'} on the GPU (pid ${rest.map((p) => p.pid).join(', ')}), which may be using the same copy engines and memory`,
    });
  const t = o.clocks ? throttled(o.clocks) : null;
  if (t) out.push({ code: 'CM_FAULT_CLOCKS_THROTTLED', cause: t });
  if (o.cv !== undefined && o.maxCv !== undefined && o.cv > o.maxCv)
    out.push({
      code: 'CM_FAULT_UNSTABLE',
      cause: `the repeats vary too much: coefficient of variation ${(o.cv * 100).toFixed(1)}% against at most ${(o.maxCv * 100).toFixed(1)}%`,
    });
  return out;
}

/**
 * The faults of a failed check: the causes seen, or `CM_FAULT_BELOW_EXPECTATION` when none was.
 *
 * @category Benchmarks
 */
export function faultsOfFailure(o: RunObservation, what: string): Fault[] {
  const observed = checkObservation(o);
  if (typeof what !== 'string') throw invalidArgument('what', 'a string saying how the check failed', what);
  const seen = seenFaults(observed);
  return seen.length
    ? seen
    : [
        {
          code: 'CM_FAULT_BELOW_EXPECTATION',
          cause: `${what}, and no cause was seen (link, NUMA node, other processes, clocks and spread look right)`,
        },
      ];
}
