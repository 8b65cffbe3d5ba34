/**
 * Saved staged-path settings: `scripts/tune-staging.js --save` measures this machine and writes
 * them; every load of the package applies them to its addon instance (each worker thread too).
 * The file is `CUDA_MEMORY_STAGING_FILE` when set (empty: none), else
 * `$XDG_CONFIG_HOME/cuda-memory/staging.json` (`~/.config/...` without XDG_CONFIG_HOME).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import { configureStaging, StagingSettings, StagingUpdate } from './copy';

export const STAGING_FILE_SCHEMA = 'cuda-memory/staging-settings@1';

/** The saved file's contents. */
export interface SavedStagingSettings {
  schema: typeof STAGING_FILE_SCHEMA;
  /** What they were measured on, for the reader; they are applied regardless. */
  measuredOn: { date: string; gpu: string; cpu: string; cpus: number; hostname: string };
  settings: StagingUpdate;
}

/** Where saved settings are read from and written to; undefined when CUDA_MEMORY_STAGING_FILE is empty. */
export function stagingSettingsPath(): string | undefined {
  const env = process.env.CUDA_MEMORY_STAGING_FILE;
  if (env !== undefined) return env === '' ? undefined : path.resolve(env);
  const base = process.env.XDG_CONFIG_HOME || path.join(os.homedir(), '.config');
  return path.join(base, 'cuda-memory', 'staging.json');
}

/** Writes settings for later loads (atomically: a temporary file renamed over the old one). */
export function saveStagingSettings(
  settings: StagingUpdate,
  measuredOn: SavedStagingSettings['measuredOn'],
  file = stagingSettingsPath(),
): string {
  if (!file) throw new Error('CUDA_MEMORY_STAGING_FILE is empty: there is nowhere to save staging settings');
  const body: SavedStagingSettings = { schema: STAGING_FILE_SCHEMA, measuredOn, settings };
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
 */
export function loadStagingSettings(file = stagingSettingsPath()): StagingSettings | undefined {
  if (!file || !fs.existsSync(file)) return undefined;
  let saved: SavedStagingSettings;
  try {
    saved = JSON.parse(fs.readFileSync(file, 'utf8'));
  } catch (e) {
    throw new Error(`cannot read staging settings from ${file}: ${(e as Error).message}`);
  }
  if (!saved || saved.schema !== STAGING_FILE_SCHEMA || typeof saved.settings !== 'object')
    throw new Error(`${file} is not a staging settings file (expected schema ${STAGING_FILE_SCHEMA})`);
  try {
    return configureStaging(saved.settings);
  } catch (e) {
    throw new Error(`staging settings in ${file} were not applied: ${(e as Error).message}`);
  }
}

/** The package's load-time call: never throws. */
export function applySavedStagingSettings(): void {
  try {
    loadStagingSettings();
  } catch (e) {
    process.emitWarning((e as Error).message, { code: 'CUDA_MEMORY_STAGING_SETTINGS' });
  }
}
