/**
 * A group's members as dcgm-exporter's HPC job mapping (`--hpc-job-mapping-dir`): one file per
 * GPU, named by its NVML index, each line a job id. dcgm-exporter then adds the job to every
 * DCGM metric of that GPU, so the metrics a fleet already scrapes carry the group. Here the job
 * ids are the names of the groups with members on the GPU, and for a scheduler's job's group
 * (`slurm-<job id>`) the job's own id, as dcgm-exporter's Slurm users expect.
 */
import * as fs from 'fs';
import * as path from 'path';
import { invalidArgument } from '../base/errors';
import type { GroupStats } from '../base/types';
import { checkFilePath, checkObjects, isArray } from '../base/validate';
import { devices as listDevices, status } from '../device/discovery';

/**
 * The mapping: for each GPU index (as dcgm-exporter names the file), the names of the groups on
 * it, sorted. Groups on simulated devices, or on a GPU whose index `indexOf` does not know, are
 * listed in `skipped`.
 *
 * @category Metrics
 */
export function hpcJobMapping(
  groups: (Pick<GroupStats, 'name' | 'device'> & Partial<Pick<GroupStats, 'job'>>)[],
  indexOf: (uuid: string) => number | null,
): { files: Map<string, string[]>; skipped: string[] } {
  const list = checkGroups(groups);
  if (typeof indexOf !== 'function') throw invalidArgument('indexOf', 'a function from a GPU uuid to its NVML index or null', indexOf);
  const files = new Map<string, string[]>();
  const skipped: string[] = [];
  for (const g of list) {
    const index = g.device === 'simulated' ? null : indexOf(g.device);
    if (index !== null && !isIndex(index))
      throw invalidArgument(`indexOf(${JSON.stringify(g.device)})`, 'a non-negative integer GPU index or null', index, RangeError);
    if (index === null) {
      skipped.push(`${g.name} on ${g.device}`);
      continue;
    }
    const names = files.get(String(index)) ?? [];
    const line = g.job ?? g.name;
    if (!names.includes(line)) names.push(line);
    files.set(String(index), names.sort());
  }
  return { files, skipped };
}

function isIndex(value: unknown): value is number {
  return typeof value === 'number' && Number.isSafeInteger(value) && value >= 0;
}

// The groups as plain pairs of strings, each field read once (groupStats() and top --json give them).
function checkGroups(groups: unknown): { name: string; device: string; job: string | null }[] {
  return checkObjects('groups', 'groups as groupStats() lists them', groups).map((g, i) => {
    const { name, device, job } = g as { name: unknown; device: unknown; job?: { id?: unknown } | null };
    // A group's name becomes a line of the file: one line, not empty.
    if (typeof name !== 'string' || name === '' || /[\r\n]/.test(name))
      throw invalidArgument(`groups[${i}].name`, 'a non-empty group name without line breaks', name);
    if (typeof device !== 'string') throw invalidArgument(`groups[${i}].device`, "a GPU uuid or 'simulated'", device);
    const id = job && typeof job === 'object' && typeof job.id === 'string' && /^\d{1,16}$/.test(job.id) ? job.id : null;
    return { name, device, job: id };
  });
}

// NVML's index of each visible GPU by uuid (dcgm-exporter numbers GPUs as NVML does).
function nvmlIndexOf(): (uuid: string) => number | null {
  const byUuid = new Map(status().available ? listDevices().map((d) => [d.uuid, d.nvmlIndex] as const) : []);
  return (uuid) => byUuid.get(uuid) ?? null;
}

/**
 * Writes the mapping into `dir` (made if missing): each GPU's file holds its groups, one per
 * line, written whole (a temporary file renamed over it, so dcgm-exporter never reads half a
 * file); the file of a GPU this machine shows with no group on it now is removed. Give it a folder
 * of its own. Returns the files written and the groups left out.
 *
 * @category Metrics
 */
export function writeHpcJobMapping(
  dir: string,
  groups: (Pick<GroupStats, 'name' | 'device'> & Partial<Pick<GroupStats, 'job'>>)[],
  indexOf: (uuid: string) => number | null = nvmlIndexOf(),
  gpuIndices: number[] = status().available ? listDevices().flatMap((d) => (d.nvmlIndex === null ? [] : [d.nvmlIndex])) : [],
): { written: string[]; removed: string[]; skipped: string[] } {
  checkFilePath('dir', dir);
  if (!isArray(gpuIndices) || ![...gpuIndices].every(isIndex))
    throw invalidArgument('gpuIndices', 'an array of non-negative integer GPU indices', gpuIndices);
  const { files, skipped } = hpcJobMapping(groups, indexOf);
  fs.mkdirSync(dir, { recursive: true });
  const written: string[] = [];
  for (const [name, jobs] of files) {
    const file = path.join(dir, name);
    const tmp = path.join(dir, `.${name}.${process.pid}.tmp`);
    fs.writeFileSync(tmp, jobs.join('\n') + '\n');
    fs.renameSync(tmp, file);
    written.push(file);
  }
  const removed: string[] = [];
  for (const index of gpuIndices) {
    const file = path.join(dir, String(index));
    if (files.has(String(index)) || !fs.existsSync(file)) continue;
    fs.rmSync(file, { force: true });
    removed.push(file);
  }
  return { written, removed, skipped };
}
