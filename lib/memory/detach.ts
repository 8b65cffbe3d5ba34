/**
 * The contract for JavaScript buffers that native work uses after the call returns, and the way
 * to take a buffer's memory for the duration of a copy.
 *
 * Node-API has no call that keeps an ArrayBuffer's memory alive once it is detached (moved by
 * `transfer()`, a transfer list, a web byte stream) and the new owner is collected. The library
 * changes nothing global to prevent it (no built-in is replaced, nothing is marked): a buffer
 * behaves exactly as before once the copy that used it has settled. The rule is Node's own for
 * its asynchronous APIs: do not detach a buffer an unsettled `copyAsync()` or a live registration
 * uses. For the hard guarantee, `copyAsync(..., { take: true })` detaches the caller's buffer
 * itself, as `postMessage` does: the library then holds the only ArrayBuffer that reaches the
 * memory until the copy settles, and hands a new one back.
 *
 * A resizable ArrayBuffer could shrink under the work: `copyAsync()` and `registerHost()` refuse
 * it (`ERR_INVALID_ARG_VALUE`); the synchronous `copy()` takes it, since no JavaScript runs
 * during that copy. SharedArrayBuffers cannot be detached or shrunk and need none of this.
 */
import { argTypeError } from '../base/errors';

// Taken once at load, so that a program that later replaces the built-ins (or freezes them)
// changes nothing here. transfer() exists from Node 21; structuredClone with a transfer list
// moves the memory without a copy in every version this package supports.
const nativeTransfer = (ArrayBuffer.prototype as { transfer?: (this: ArrayBuffer) => ArrayBuffer }).transfer;
const nativeClone = structuredClone;

/** @internal The ArrayBuffer or SharedArrayBuffer behind `memory`. */
export function bufferOf(memory: ArrayBufferLike | ArrayBufferView): ArrayBufferLike {
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
 * @internal Checks that `memory` can be taken for a copy: the whole of a detachable ArrayBuffer
 * (a view over part of one would take its neighbours' memory too, Node's pool of small Buffers
 * among them).
 */
export function checkTakeable(name: string, memory: ArrayBufferLike | ArrayBufferView): void {
  const buffer = bufferOf(memory);
  if (isShared(buffer)) return;
  const view = ArrayBuffer.isView(memory) ? memory : undefined;
  if (view !== undefined && (view.byteOffset !== 0 || view.byteLength !== buffer.byteLength))
    throw argTypeError(
      `Expected ${name} to cover its whole ArrayBuffer for { take: true } but received a view of bytes ` +
        `${view.byteOffset} to ${view.byteOffset + view.byteLength} of one of ${buffer.byteLength} bytes; taking it would take ` +
        'the rest too (small Buffers share one pool). Use a buffer of its own (Buffer.alloc(), new Uint8Array(n)).',
      'ERR_INVALID_ARG_VALUE',
    );
}

/**
 * @internal Moves the memory of `memory` into a new ArrayBuffer that only the caller reaches,
 * detaching the original (every view over it reads as empty), and returns a view of the same
 * kind over the new one. SharedArrayBuffers are returned as they are.
 */
export function takeMemory<T extends ArrayBufferLike | ArrayBufferView>(memory: T): T {
  const buffer = bufferOf(memory);
  if (isShared(buffer)) return memory;
  const ab = buffer as ArrayBuffer;
  let moved: ArrayBuffer;
  try {
    moved = nativeTransfer ? Reflect.apply(nativeTransfer, ab, []) : nativeClone(ab, { transfer: [ab] });
  } catch (e) {
    throw argTypeError(
      `Cannot take this buffer for the copy: ${(e as Error).message}. Buffers Node marks untransferable ` +
        '(its pool of small Buffers) and memory made by an addon cannot be taken; copy without { take: true }.',
      'ERR_INVALID_ARG_VALUE',
    );
  }
  // Node 20 copies a buffer it marks untransferable instead of moving it.
  if (moved.byteLength > 0 && ab.byteLength !== 0)
    throw argTypeError('Cannot take this buffer for the copy: the runtime copied it instead of moving it', 'ERR_INVALID_ARG_VALUE');
  return viewLike(memory, moved) as T;
}

/** @internal A view of the same kind as `like` over the whole of `ab` (or `ab` itself). */
export function viewLike(like: ArrayBufferLike | ArrayBufferView, ab: ArrayBufferLike): ArrayBufferLike | ArrayBufferView {
  if (!ArrayBuffer.isView(like)) return ab;
  if (Buffer.isBuffer(like)) return Buffer.from(ab);
  if (like instanceof DataView) return new DataView(ab);
  const Ctor = like.constructor as new (buffer: ArrayBufferLike) => ArrayBufferView;
  return new Ctor(ab);
}
