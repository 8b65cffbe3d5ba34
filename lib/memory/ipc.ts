/**
 * CUDA IPC handles: what {@link DeviceBuffer.exportIpc} returns and
 * {@link DeviceBuffer.importIpc} takes.
 */
import { InterprocessError } from '../base/errors';

/**
 * An exported device buffer, as a plain object of strings and numbers: it survives
 * `process.send`, `worker.postMessage`, and `JSON.stringify`/`JSON.parse` unchanged, and
 * importIpc() takes it as an object or as its JSON text.
 *
 * - `handle`: the 64 bytes of `cudaIpcMemHandle_t`, in hex, for the allocation holding the
 *   buffer (for a block of an allocator, the region it was carved from);
 * - `offset`, `byteLength`: where the buffer lies in that allocation;
 * - `device`: the GPU's uuid (the importer opens it on the device with that uuid);
 * - `record`, `token`, `pid`: the export's record in shared memory and its random token; the
 *   importer checks the handle against the record, so a forged or altered handle is refused
 *   before it reaches the driver, and the exporter counts its importers there.
 *
 * @category Processes
 */
export interface IpcHandle {
  type: 'cuda-memory/ipc@1';
  record: string;
  token: string;
  handle: string;
  device: string;
  offset: number;
  byteLength: number;
  pid: number;
}

function invalid(why: string): InterprocessError {
  return new InterprocessError(`the IPC handle is not valid: ${why}`, { code: 'ERR_IPC_HANDLE_INVALID' });
}

/** @internal Checks the shape of a handle given as an object or JSON text. */
export function parseIpcHandle(value: unknown): IpcHandle {
  let h = value;
  if (typeof h === 'string') {
    try {
      h = JSON.parse(h);
    } catch {
      throw invalid('it is a string but not JSON');
    }
  }
  if (h === null || typeof h !== 'object' || Array.isArray(h)) throw invalid('expected the object exportIpc() returned, or its JSON');
  const o = h as Record<string, unknown>;
  if (o.type !== 'cuda-memory/ipc@1') throw invalid(`its type is ${JSON.stringify(o.type)}, expected "cuda-memory/ipc@1"`);
  for (const k of ['record', 'token', 'handle', 'device'] as const) if (typeof o[k] !== 'string') throw invalid(`${k} must be a string`);
  for (const k of ['offset', 'byteLength', 'pid'] as const)
    if (typeof o[k] !== 'number' || !Number.isSafeInteger(o[k]) || (o[k] as number) < 0)
      throw invalid(`${k} must be a non-negative integer`);
  if (!/^[0-9a-f]{128}$/i.test(o.handle as string)) throw invalid('handle must be 128 hex digits');
  if (!/^[0-9a-f]{32}$/i.test(o.token as string)) throw invalid('token must be 32 hex digits');
  return o as unknown as IpcHandle;
}

/** @internal The error of freeing an exported buffer that processes still have open. */
export function inUseError(importers: number[]): InterprocessError {
  return new InterprocessError(
    `the buffer is exported and still open in process${importers.length === 1 ? '' : 'es'} ${importers.join(', ')}; ` +
      'they must free their imported buffers first (freeing it now would leave their use undefined, as CUDA documents), ' +
      'or free({ force: true })',
    { code: 'ERR_IPC_IN_USE', importers },
  );
}
