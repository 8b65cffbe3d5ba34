/**
 * The key that the library's own factories pass to constructors users must not call: those
 * objects wrap native memory and are made only by `DeviceBuffer.alloc`, `createAllocator` and the
 * like. A constructor called without it refuses at once, instead of making an object that fails
 * on first use.
 */
import * as path from 'path';
import { CudaMemoryError, argTypeError, describe } from './errors';
import { isInstance } from './validate';

/** @internal */
export const kInternal: unique symbol = Symbol('cuda-memory.internal');

/** @internal Throws unless `token` is {@link kInternal}; `factory` names what to call instead. */
export function checkInternal(token: unknown, what: string, factory: string): void {
  if (token !== kInternal) throw argTypeError(`${what} is not constructed directly; use ${factory}`, 'ERR_ILLEGAL_CONSTRUCTOR');
}

/** @internal The error a method or accessor gets when called on something not of its class. */
export function invalidThis(cls: string, member: string, receiver: unknown): TypeError {
  return argTypeError(
    `${cls}.prototype.${member} was called on ${describe(receiver)}; call it on a ${cls} of this library`,
    'ERR_INVALID_THIS',
  );
}

/**
 * @internal Makes every method and accessor of `cls.prototype` (symbols too) refuse a receiver
 * that is not a `cls` with {@link invalidThis}, as Node's own classes refuse theirs, instead of
 * failing somewhere inside with a TypeError that has no code. Members named in `inline` check
 * for themselves (hot paths: a wrapper there costs every call).
 */
export function guardReceivers(cls: abstract new (...args: never[]) => unknown, name: string, inline: readonly PropertyKey[] = []): void {
  const proto = cls.prototype as object;
  for (const key of Reflect.ownKeys(proto)) {
    if (key === 'constructor' || inline.includes(key)) continue;
    const d = Object.getOwnPropertyDescriptor(proto, key)!;
    const member = typeof key === 'symbol' ? `[${key.description ?? ''}]` : key;
    const guard = <F extends (...args: unknown[]) => unknown>(fn: F): F => {
      const wrapped = function (this: unknown, ...args: unknown[]) {
        if (!isInstance(this, cls)) throw invalidThis(name, member, this);
        return fn.apply(this, args);
      };
      Object.defineProperty(wrapped, 'name', { value: fn.name });
      Object.defineProperty(wrapped, 'length', { value: fn.length });
      return wrapped as F;
    };
    if (typeof d.value === 'function') d.value = guard(d.value);
    if (d.get) d.get = guard(d.get);
    if (d.set) d.set = guard(d.set);
    Object.defineProperty(proto, key, d);
  }
}

/**
 * @internal The value of an object's first own field that makes `structuredClone` and
 * `postMessage` of it throw a coded error (ERR_NOT_CLONEABLE) instead of copying its fields into
 * a plain object or failing with a bare DataCloneError: cloning reads each own enumerable
 * property, and this one's getter throws. JSON.stringify skips it (toJSON).
 */
export function notCloneable(what: string): object {
  const guard = {};
  Object.defineProperty(guard, 'toJSON', { value: () => undefined });
  Object.defineProperty(guard, 'cannotBeCloned', {
    enumerable: true,
    get() {
      throw new CudaMemoryError(
        `${what} cannot be cloned or sent to another thread (structuredClone, postMessage): it stands for memory or a handle that this thread owns; copy the contents into an ArrayBuffer to send them`,
        'ERR_NOT_CLONEABLE',
      );
    },
  });
  return Object.freeze(guard);
}

/**
 * @internal The place (file:line:col) of the first frame of `stack` outside this package's own
 * code: where a user's code made something, for reports that say where it came from. Null
 * when every frame is the library's or there is no stack.
 */
export function creationSite(stack: string | undefined): string | null {
  if (!stack) return null;
  const own = path.join(__dirname, '..');
  for (const line of stack.split('\n').slice(1)) {
    const frame = line.trim();
    if (!frame.startsWith('at ') || frame.includes(own) || frame.includes('node:internal')) continue;
    const place = /\((.*)\)$/.exec(frame); // "at f (file:line:col)": the place alone
    return place ? place[1] : frame.slice(3);
  }
  return null;
}
