/**
 * Keeping the memory of JavaScript buffers in place while native work uses it.
 *
 * An ArrayBuffer can lose its memory under a copy running on another thread: transferred away
 * (`postMessage` or `structuredClone` with a transfer list, `ArrayBuffer.prototype.transfer()` in
 * Node 21 and later), the new owner dropped, and the memory freed by the collector while the copy
 * still reads or writes it. Node-API has no call to keep an ArrayBuffer's memory alive, so the
 * library stops the transfer instead, for as long as it uses the buffer:
 *
 * - Every ArrayBuffer given to `copyAsync()` or `registerHost()` is marked with
 *   `worker_threads.markAsUntransferable()`, for good: a transfer list that names it copies it
 *   (Node 20 and earlier) or throws a `DataCloneError` (Node 21 and later). The memory of pinned
 *   and shared pinned buffers is marked by Node itself.
 * - While a copy runs, a buffer is registered, or a pinned buffer lives, `transfer()` and
 *   `transferToFixedLength()` of its ArrayBuffer throw a TypeError with code
 *   `ERR_BUFFER_IN_USE`. Many runtimes let these two detach a marked buffer, so the library wraps
 *   them on `ArrayBuffer.prototype` the first time it holds a buffer (in runtimes that have them);
 *   every other buffer behaves as before.
 * - A resizable ArrayBuffer could shrink under the work: `copyAsync()` and `registerHost()` refuse
 *   it (`ERR_INVALID_ARG_VALUE`); the synchronous `copy()` takes it, since no JavaScript runs
 *   during that copy. SharedArrayBuffers cannot be detached or shrunk and need none of this.
 */
import { markAsUntransferable } from 'node:worker_threads';
import { argTypeError } from '../base/errors';

// How many holders each buffer has; a WeakMap, so a held buffer can still be collected once
// nothing else refers to it (a copy keeps its buffers referenced until it settles).
const held = new WeakMap<ArrayBuffer, number>();
let guarded = false;

function inUseError(method: string): TypeError {
  return argTypeError(
    `Cannot ${method}() this ArrayBuffer: cuda-memory is using its memory (an asynchronous copy, a registration ` +
      'or a pinned buffer). Wait for the copy, or free the registration or the pinned buffer first, or transfer a copy (slice()).',
    'ERR_BUFFER_IN_USE',
  );
}

// Wraps the two detaching methods once: a held buffer refuses, every other one is untouched.
function guardTransfer(): void {
  if (guarded) return;
  guarded = true;
  const proto = ArrayBuffer.prototype as unknown as Record<string, unknown>;
  for (const method of ['transfer', 'transferToFixedLength']) {
    const original = proto[method];
    if (typeof original !== 'function') continue;
    const wrapped = {
      [method](this: ArrayBuffer, ...args: unknown[]): unknown {
        if (held.has(this)) throw inUseError(method);
        return Reflect.apply(original, this, args);
      },
    }[method];
    Object.defineProperty(proto, method, { value: wrapped, writable: true, enumerable: false, configurable: true });
  }
}

function bufferOf(memory: ArrayBufferLike | ArrayBufferView): ArrayBufferLike {
  return ArrayBuffer.isView(memory) ? memory.buffer : memory;
}

function isShared(buffer: ArrayBufferLike): boolean {
  return typeof SharedArrayBuffer !== 'undefined' && buffer instanceof SharedArrayBuffer;
}

/**
 * @internal Checks that a buffer given to work that outlives the call can keep its memory: a
 * resizable ArrayBuffer is refused. `name` is the argument's name.
 */
export function checkHoldable(name: string, memory: ArrayBufferLike | ArrayBufferView): void {
  const buffer = bufferOf(memory);
  if (!isShared(buffer) && (buffer as { resizable?: boolean }).resizable === true)
    throw argTypeError(
      `Expected a fixed-length buffer for ${name} but received a view of a resizable ArrayBuffer, which could shrink ` +
        'while the work runs. Use copy() (synchronous), or copy into a fixed-length or pinned buffer first.',
      'ERR_INVALID_ARG_VALUE',
    );
}

/**
 * @internal Holds the memory of a buffer in place until {@link releaseBuffer}: marks it
 * untransferable (unless `mark` is false: memory the addon made, which Node marks already and
 * which the addon must remain free to detach) and makes transfer() refuse it.
 */
export function holdBuffer(memory: ArrayBufferLike | ArrayBufferView, mark = true): void {
  const buffer = bufferOf(memory);
  if (isShared(buffer)) return;
  const ab = buffer as ArrayBuffer;
  if (mark) markAsUntransferable(ab);
  held.set(ab, (held.get(ab) ?? 0) + 1);
  guardTransfer();
}

/** @internal Gives back one hold taken by {@link holdBuffer}. */
export function releaseBuffer(memory: ArrayBufferLike | ArrayBufferView): void {
  const buffer = bufferOf(memory);
  if (isShared(buffer)) return;
  const ab = buffer as ArrayBuffer;
  const n = held.get(ab) ?? 0;
  if (n <= 1) held.delete(ab);
  else held.set(ab, n - 1);
}
