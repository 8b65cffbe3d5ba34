/**
 * The staged path's settings: reading and changing them for this thread's addon instance, where
 * its threads and pinned ring sit (stagingPlacement), and the settings saved for later loads.
 * `scripts/tune-staging.js --save` measures this machine and writes them; every load of the
 * package applies them to its addon instance (each worker thread too). The file is
 * `CUDA_MEMORY_STAGING_FILE` when set (empty: none), else `$XDG_CONFIG_HOME/cuda-memory/staging.json`
 * (`~/.config/...` without XDG_CONFIG_HOME).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { native } from '../binding/native';
import { checkDevice, checkOptions, checkSize } from '../base/validate';
import { CudaMemoryError, invalidArgument } from '../base/errors';
import { readBounded } from '../base/files';
import { knownDeviceCount } from '../device/discovery';
import type { StagingSettings, StagingPlacement } from '../base/types';

export type { StagingSettings, StagingPlacement } from '../base/types';

/**
 * What {@link configureStaging} takes: any field, `null` for its default.
 *
 * @category Copies
 */
export type StagingUpdate = {
  [K in keyof Omit<StagingSettings, 'autoThreshold' | 'ringBytes'>]?: StagingSettings[K] | null;
} & { autoThreshold?: { h2d?: number | null; d2h?: number | null } | null };

/**
 * Reads or changes the staged path's settings (for this thread's instance of the addon). Settings
 * saved by `scripts/tune-staging.js --save` are applied when the package loads (see
 * {@link loadStagingSettings}).
 *
 * @category Copies
 */
export function configureStaging(settings?: StagingUpdate): StagingSettings {
  if (settings === undefined) return native.configureStaging();
  return native.configureStaging(checkStagingUpdate(settings));
}

/**
 * The fields of `settings` that are set, each checked against the range the addon takes (so
 * that what is saved also loads); unknown fields are left out.
 */
function checkStagingUpdate(settings: unknown): Record<string, unknown> {
  const o = checkOptions<StagingUpdate>('settings', settings);
  const out: Record<string, unknown> = {};
  const size = (name: string, v: unknown, min: number, max = Number.MAX_SAFE_INTEGER) => {
    if (v === null) return null;
    const n = checkSize(`settings.${name}`, v, min);
    if (n > max) throw invalidArgument(`settings.${name}`, `an integer from ${min} to ${max}`, v, RangeError);
    return n;
  };
  if (o.chunkBytes !== undefined) out.chunkBytes = size('chunkBytes', o.chunkBytes, 65536, 2 ** 30);
  if (o.firstChunkBytes !== undefined) out.firstChunkBytes = size('firstChunkBytes', o.firstChunkBytes, 65536, 2 ** 30);
  if (o.lastChunkBytes !== undefined) out.lastChunkBytes = size('lastChunkBytes', o.lastChunkBytes, 65536, 2 ** 30);
  if (o.slots !== undefined) out.slots = size('slots', o.slots, 2, 64);
  if (o.threads !== undefined) out.threads = size('threads', o.threads, 1, 256);
  if (o.streaming !== undefined) {
    if (o.streaming !== null && o.streaming !== 'auto' && typeof o.streaming !== 'boolean')
      throw invalidArgument('settings.streaming', "true, false or 'auto'", o.streaming, TypeError);
    out.streaming = o.streaming;
  }
  if (o.autoThreshold !== undefined) {
    if (o.autoThreshold === null) out.autoThreshold = null;
    else {
      const t = checkOptions<{ h2d?: number | null; d2h?: number | null }>('settings.autoThreshold', o.autoThreshold);
      const th: Record<string, number | null> = {};
      if (t.h2d !== undefined) th.h2d = size('autoThreshold.h2d', t.h2d, 0);
      if (t.d2h !== undefined) th.d2h = size('autoThreshold.d2h', t.d2h, 0);
      out.autoThreshold = th;
    }
  }
  return out;
}

/**
 * Where the staged path for `device` runs: on a host of several NUMA nodes, its copy threads on
 * the GPU's node's CPUs and its pinned ring in that node's memory, and whether the kernel did as
 * asked. Throws CudaUnavailableError without CUDA.
 *
 * @category Copies
 */
export function stagingPlacement(device = 0): StagingPlacement {
  return native.stagingPlacement(checkDevice(device, knownDeviceCount()));
}

export const STAGING_FILE_SCHEMA = 'cuda-memory/staging-settings@1';

// A settings file is a few hundred bytes; the bound keeps a path such as /dev/zero from holding
// every load of the package.
const STAGING_FILE_MAX_BYTES = 1 << 20;

/**
 * The saved file's contents.
 *
 * @category Copies
 */
export interface SavedStagingSettings {
  schema: typeof STAGING_FILE_SCHEMA;
  /** What they were measured on, for the reader; they are applied regardless. */
  measuredOn: { date: string; gpu: string; cpu: string; cpus: number; hostname: string };
  settings: StagingUpdate;
}

/**
 * Where saved settings are read from and written to; undefined when CUDA_MEMORY_STAGING_FILE is empty.
 *
 * @category Copies
 */
export function stagingSettingsPath(): string | undefined {
  const env = process.env.CUDA_MEMORY_STAGING_FILE;
  if (env !== undefined) return env === '' ? undefined : path.resolve(env);
  const base = process.env.XDG_CONFIG_HOME || path.join(os.homedir(), '.config');
  return path.join(base, 'cuda-memory', 'staging.json');
}

/**
 * Writes settings for later loads (atomically: a temporary file renamed over the old one). Every
 * argument is checked first, the settings as {@link configureStaging} checks them, so that what is
 * written loads; unknown fields of `settings` are not written.
 *
 * @category Copies
 */
export function saveStagingSettings(
  settings: StagingUpdate,
  measuredOn: SavedStagingSettings['measuredOn'],
  file = stagingSettingsPath(),
): string {
  if (file !== undefined && (typeof file !== 'string' || file === '')) throw invalidArgument('file', 'a file path', file);
  if (!file)
    throw new CudaMemoryError('CUDA_MEMORY_STAGING_FILE is empty: there is nowhere to save staging settings', 'ERR_STAGING_SETTINGS');
  if (settings === null || settings === undefined) throw invalidArgument('settings', 'an object of staging settings', settings);
  const checked = checkStagingUpdate(settings) as StagingUpdate;
  const m = checkOptions<SavedStagingSettings['measuredOn']>('measuredOn', measuredOn);
  if (measuredOn === null || measuredOn === undefined)
    throw invalidArgument('measuredOn', 'an object { date, gpu, cpu, cpus, hostname }', measuredOn);
  for (const k of ['date', 'gpu', 'cpu', 'hostname'] as const)
    if (typeof m[k] !== 'string') throw invalidArgument(`measuredOn.${k}`, 'a string', m[k]);
  const cpus = checkSize('measuredOn.cpus', m.cpus);
  const on = { date: m.date!, gpu: m.gpu!, cpu: m.cpu!, cpus, hostname: m.hostname! };
  const body: SavedStagingSettings = { schema: STAGING_FILE_SCHEMA, measuredOn: on, settings: checked };
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify(body, null, 2) + '\n');
  fs.renameSync(tmp, file);
  return file;
}

/**
 * Reads the saved settings and applies them with configureStaging(). Returns the settings in
 * force, or undefined when there is no file. A file that cannot be read or applied throws with
 * the file's name; the load-time call turns that into a process warning.
 *
 * @category Copies
 */
export function loadStagingSettings(file = stagingSettingsPath()): StagingSettings | undefined {
  if (!file || !fs.existsSync(file)) return undefined;
  const unreadable = (why: string) => new CudaMemoryError(`cannot read staging settings from ${file}: ${why}`, 'ERR_STAGING_SETTINGS');
  let saved: SavedStagingSettings;
  try {
    const read = readBounded(file, STAGING_FILE_MAX_BYTES);
    if (!read.ok) throw unreadable(`it holds more than ${STAGING_FILE_MAX_BYTES} bytes`);
    saved = JSON.parse(read.bytes.toString('utf8'));
  } catch (e) {
    throw e instanceof CudaMemoryError ? e : unreadable((e as Error).message);
  }
  if (!saved || saved.schema !== STAGING_FILE_SCHEMA || typeof saved.settings !== 'object')
    throw new CudaMemoryError(`${file} is not a staging settings file (expected schema ${STAGING_FILE_SCHEMA})`, 'ERR_STAGING_SETTINGS');
  try {
    return configureStaging(saved.settings);
  } catch (e) {
    throw new CudaMemoryError(`staging settings in ${file} were not applied: ${(e as Error).message}`, 'ERR_STAGING_SETTINGS');
  }
}

let savedSettingsApplied = false;

/**
 * The load-time call of the entry points that copy (`cuda-memory`, `cuda-memory/bench`): the
 * first call in a thread applies the saved settings, later ones do nothing. Never throws.
 *
 * @category Copies
 */
export function applySavedStagingSettings(): void {
  if (savedSettingsApplied) return;
  savedSettingsApplied = true;
  try {
    loadStagingSettings();
  } catch (e) {
    process.emitWarning((e as Error).message, { code: 'CUDA_MEMORY_STAGING_SETTINGS' });
  }
}
