/**
 * CUDA IPC handles: what {@link DeviceBuffer.exportIpc} returns and
 * {@link DeviceBuffer.importIpc} takes.
 */
import { InterprocessError, jsonText } from '../base/errors';
import { isReadable } from '../base/validate';
import type { IpcHandle } from '../base/types';

export type { IpcHandle } from '../base/types';

function invalid(why: string): InterprocessError {
  return new InterprocessError(`the IPC handle is not valid: ${why}`, { code: 'ERR_IPC_HANDLE_INVALID' });
}

// A handle or descriptor given as an object or as its JSON text, as a plain object.
function jsonObject(value: unknown, expected: string): Record<string, unknown> {
  let h = value;
  if (typeof h === 'string') {
    try {
      h = JSON.parse(h);
    } catch {
      throw invalid('it is a string but not JSON');
    }
  }
  if (h === null || typeof h !== 'object' || !isReadable(h) || Array.isArray(h)) throw invalid(`expected ${expected}, or its JSON`);
  return h as Record<string, unknown>;
}

// A GPU's uuid as CUDA writes it ("GPU-" and lower-case hex), from any case; anything else as it is.
function canonicalUuid(device: string): string {
  return /^GPU-[0-9a-f-]{36}$/i.test(device) ? `GPU-${device.slice(4).toLowerCase()}` : device;
}

const RECORD = /^cuda-memory-ipc\.([0-9]{1,10})\.([0-9a-fA-F]{16})$/;

/**
 * @internal Checks a handle given as an object or JSON text; returns it in the one spelling the
 * exporter writes (lower-case hex, the record's pid without leading zeros, the uuid as CUDA
 * writes it, no other fields), so that every spelling of a handle opens the same record and is
 * the same memory to the check that nothing is opened twice.
 */
export function parseIpcHandle(value: unknown): IpcHandle {
  const o = jsonObject(value, 'the object exportIpc() returned');
  if (o.type !== 'cuda-memory/ipc@1') throw invalid(`its type is ${jsonText(o.type)}, expected "cuda-memory/ipc@1"`);
  for (const k of ['record', 'token', 'handle', 'device'] as const) if (typeof o[k] !== 'string') throw invalid(`${k} must be a string`);
  for (const k of ['offset', 'byteLength', 'pid'] as const)
    if (typeof o[k] !== 'number' || !Number.isSafeInteger(o[k]) || (o[k] as number) < 0)
      throw invalid(`${k} must be a non-negative integer`);
  if (!/^[0-9a-f]{128}$/i.test(o.handle as string)) throw invalid('handle must be 128 hex digits');
  if (!/^[0-9a-f]{32}$/i.test(o.token as string)) throw invalid('token must be 32 hex digits');
  const record = RECORD.exec(o.record as string);
  if (!record) throw invalid(`record must be "cuda-memory-ipc.<pid>.<16 hex digits>", got ${jsonText(o.record)}`);
  // `+ 0` turns a -0 (which JSON can carry) into 0.
  return {
    type: 'cuda-memory/ipc@1',
    record: `cuda-memory-ipc.${Number(record[1])}.${record[2].toLowerCase()}`,
    token: (o.token as string).toLowerCase(),
    handle: (o.handle as string).toLowerCase(),
    device: canonicalUuid(o.device as string),
    offset: (o.offset as number) + 0,
    byteLength: (o.byteLength as number) + 0,
    pid: (o.pid as number) + 0,
  };
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

/**
 * A CUDA IPC descriptor any process can open without this library (PyTorch, CuPy, plain CUDA),
 * as {@link DeviceBuffer.exportCudaIpc} writes it and {@link DeviceBuffer.importCudaIpc} reads
 * it; JSON of strings and numbers only (docs/processes.md, "Sharing with Python").
 *
 * - `handle`: the 64 bytes of `cudaIpcMemHandle_t` in hex (128 digits), for the whole CUDA
 *   allocation holding the buffer; PyTorch's versioned handles (a version byte, `c`, then the 64
 *   bytes: 132 digits) are read too;
 * - `offset`, `byteLength`: where the buffer lies in that allocation;
 * - `allocationBytes`: the allocation's size, when the exporter knows it (the importer refuses a
 *   handle that opens an allocation of another size);
 * - `device`: the GPU's uuid ("GPU-…"), which names the same GPU in every process whatever
 *   CUDA_VISIBLE_DEVICES says;
 * - `pid`: the exporting process.
 *
 * @category Processes
 */
export interface CudaIpcDescriptor {
  type: 'cuda-ipc@1';
  handle: string;
  offset: number;
  byteLength: number;
  allocationBytes?: number;
  device: string;
  pid: number;
}

/**
 * @internal Checks a descriptor given as an object or JSON text; returns it in one spelling: a
 * 128-digit lower-case handle (PyTorch's prefix taken off), the uuid as CUDA writes it, no
 * fields the format does not know. What it opens, and what the check that nothing is opened twice
 * compares, is the handle's bytes and the range; `allocationBytes` and `pid` are not part of it.
 */
export function parseCudaIpcDescriptor(value: unknown): CudaIpcDescriptor {
  const o = jsonObject(value, 'a cuda-ipc@1 descriptor object');
  if (o.type !== 'cuda-ipc@1') throw invalid(`its type is ${jsonText(o.type)}, expected "cuda-ipc@1"`);
  if (typeof o.handle !== 'string' || !/^[0-9a-f]+$/i.test(o.handle)) throw invalid('handle must be a string of hex digits');
  let handle = o.handle.toLowerCase();
  if (handle.length === 132) {
    // PyTorch's shareable handle: a version byte, a type byte, then cudaIpcMemHandle_t.
    const type = handle.slice(2, 4);
    if (type === '65')
      throw invalid(
        "it is a PyTorch expandable-segment handle ('e'): that memory is mapped with cuMemCreate and cannot be opened with cudaIpcOpenMemHandle; export from a process without expandable_segments",
      );
    if (type !== '63') throw invalid(`its 66-byte handle has type byte 0x${type}, expected 0x63 ('c', a cudaMalloc block)`);
    handle = handle.slice(4);
  }
  if (handle.length !== 128) throw invalid(`handle must be 128 hex digits (the 64 bytes of cudaIpcMemHandle_t), got ${o.handle.length}`);
  if (typeof o.device !== 'string' || !/^GPU-[0-9a-f-]{36}$/i.test(o.device)) throw invalid('device must be a GPU uuid ("GPU-…")');
  for (const k of ['offset', 'byteLength', 'pid'] as const)
    if (typeof o[k] !== 'number' || !Number.isSafeInteger(o[k]) || (o[k] as number) < 0)
      throw invalid(`${k} must be a non-negative integer`);
  if ((o.byteLength as number) === 0) throw invalid('byteLength must be at least 1');
  if (
    o.allocationBytes !== undefined &&
    (typeof o.allocationBytes !== 'number' || !Number.isSafeInteger(o.allocationBytes) || o.allocationBytes < 1)
  )
    throw invalid('allocationBytes must be a positive integer when given');
  if (o.allocationBytes !== undefined && (o.offset as number) + (o.byteLength as number) > (o.allocationBytes as number))
    throw invalid(`offset ${o.offset} + byteLength ${o.byteLength} runs past allocationBytes ${o.allocationBytes}`);
  // `+ 0` turns a -0 (which JSON can carry) into 0.
  return {
    type: 'cuda-ipc@1',
    handle,
    offset: (o.offset as number) + 0,
    byteLength: o.byteLength as number,
    ...(o.allocationBytes !== undefined ? { allocationBytes: o.allocationBytes as number } : {}),
    device: canonicalUuid(o.device),
    pid: (o.pid as number) + 0,
  };
}
