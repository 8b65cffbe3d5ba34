/**
 * The key that the library's own factories pass to constructors users must not call: those
 * objects wrap native memory and are made only by `DeviceBuffer.alloc`, `createAllocator` and the
 * like. A constructor called without it refuses at once, instead of making an object that fails
 * on first use.
 */
import { argTypeError } from './errors';

/** @internal */
export const kInternal: unique symbol = Symbol('cuda-memory.internal');

/** @internal Throws unless `token` is {@link kInternal}; `factory` names what to call instead. */
export function checkInternal(token: unknown, what: string, factory: string): void {
  if (token !== kInternal) throw argTypeError(`${what} is not constructed directly; use ${factory}`, 'ERR_ILLEGAL_CONSTRUCTOR');
}
