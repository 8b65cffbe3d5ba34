/**
 * Pinned host memory shared between processes: a file in shared memory (see {@link shmDir}),
 * mapped by each process and page-locked in each (cudaHostRegister, portable). A producer
 * copies from its GPU into it and a consumer copies from it to its GPU, both at pinned speed,
 * with no copy through JavaScript; `bytes` is the shared memory itself in every process.
 */
import * as path from 'path';
import { PinnedBuffer } from './buffers';
import { native } from '../binding/native';
import { checkDevice, checkOptions, checkSize } from '../base/validate';
import { knownDeviceCount, requireCuda } from '../device/discovery';
import { checkShmName, shmDir } from '../base/shm';
import { kInternal } from '../base/internal';

/**
 * Options of {@link createSharedPinned} and {@link openSharedPinned}.
 *
 * @category Processes
 */
export interface SharedPinnedOptions {
  /** Device whose context registers it (portable: usable with every device); default 0. */
  device?: number;
}

const PREFIX = 'cuda-memory-pinned.';

function fileOf(name: string): string {
  return path.join(shmDir(), PREFIX + checkShmName('name', name));
}

/**
 * A {@link PinnedBuffer} over shared memory that other processes can open by its name.
 *
 * @category Processes
 */
export class SharedPinnedBuffer extends PinnedBuffer {
  /** The name other processes open it by. */
  readonly name: string;
  /** True in the process that created it: its free() also removes the name. */
  readonly creator: boolean;
  /** The file in shared memory. */
  readonly path: string;

  /** @internal */
  constructor(token: symbol, handle: number, bytes: Uint8Array, device: number, name: string, creator: boolean, file: string) {
    super(token, handle, bytes, device, 1, 'sharedMemory');
    this.name = name;
    this.creator = creator;
    this.path = file;
  }
}

/**
 * Creates `bytes` of shared pinned memory under `name` (ERR_SHM_EXISTS if the name is taken).
 * The space is reserved at once, so a full shared-memory file system is an error here
 * (ERR_SHM_NO_SPACE), never a crash later. free() unpins and unmaps it and removes the name;
 * processes that opened it keep their mapping until they free it.
 *
 * @category Processes
 */
export function createSharedPinned(name: string, bytes: number, options?: SharedPinnedOptions): SharedPinnedBuffer {
  const file = fileOf(name);
  const n = checkSize('bytes', bytes, 1);
  const device = checkDevice(checkOptions<SharedPinnedOptions>('options', options).device, knownDeviceCount());
  requireCuda();
  const [h, ab] = native.sharedHostCreate(file, n, device);
  return new SharedPinnedBuffer(kInternal, h, new Uint8Array(ab), device, name, true, file);
}

/**
 * Opens shared pinned memory another process created (ERR_SHM_NOT_FOUND if there is none).
 *
 * @category Processes
 */
export function openSharedPinned(name: string, options?: SharedPinnedOptions): SharedPinnedBuffer {
  const file = fileOf(name);
  const device = checkDevice(checkOptions<SharedPinnedOptions>('options', options).device, knownDeviceCount());
  requireCuda();
  const [h, ab] = native.sharedHostOpen(file, device);
  return new SharedPinnedBuffer(kInternal, h, new Uint8Array(ab), device, name, false, file);
}

/**
 * Removes the name of shared pinned memory whose creator exited without freeing it; processes
 * that have it open keep it. Returns whether there was one.
 *
 * @category Processes
 */
export function unlinkSharedPinned(name: string): boolean {
  return native.sharedHostUnlink(fileOf(name));
}
