/**
 * What every kind of memory shares, below the buffer classes: the error a freed buffer gives, and
 * the symbol by which memory behind a native handle (managed memory) tells copies its handle.
 */
import { CudaError } from '../base/errors';

/** @internal Throws the error every use of a freed buffer gets. */
export function freedError(what: string): CudaError {
  return new CudaError(`${what} was freed and can no longer be used`, { code: 'ERR_BUFFER_FREED', call: what });
}

/** @internal Implemented by memory of other kinds behind a handle (managed memory), which copies take as they are. */
export const kHandleMemory = Symbol('cuda-memory.handle');
