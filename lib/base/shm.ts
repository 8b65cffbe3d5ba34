import * as path from 'path';
import { argTypeError, argRangeError, jsonText } from './errors';

/**
 * Where files that processes share live: this user's own folder `cuda-memory-<uid>` (by effective
 * uid) in `CUDA_MEMORY_SHM_DIR`, or in /dev/shm (a tmpfs on Linux). The library makes it, mode
 * 0700, the first time it creates a file there, and uses it only while it is a directory (not a
 * link) owned by this user that no other user may enter; otherwise InterprocessError
 * ERR_SHM_UNTRUSTED says why. Every cooperating process must see the same folder.
 *
 * @category Processes
 */
export function shmDir(): string {
  const uid = typeof process.geteuid === 'function' ? process.geteuid() : 0;
  return path.join(process.env.CUDA_MEMORY_SHM_DIR || '/dev/shm', `cuda-memory-${uid}`);
}

const NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$/;

/** @internal Checks a name that becomes part of a file name. */
export function checkShmName(what: string, name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name))
    throw argTypeError(
      `Expected 1 to 64 of A-Z a-z 0-9 . _ - (not starting with a dot) for ${what} but received ${typeof name === 'string' ? JSON.stringify(name) : typeof name}`,
    );
  return name;
}

/**
 * The default wait for a shared file's lock, in milliseconds.
 *
 * @category Processes
 */
export const DEFAULT_LOCK_TIMEOUT_MS = 5000;

/**
 * @internal How long to wait for a shared file's lock: the option, else CUDA_MEMORY_LOCK_TIMEOUT_MS,
 * else `fallback` ({@link DEFAULT_LOCK_TIMEOUT_MS}); 1 ms to a day. A wait that runs out is an
 * InterprocessError ERR_SHM_LOCK_TIMEOUT naming the file and what was waiting. No wait at all (0)
 * is refused: members joining and leaving at the same moment take the lock in turn, and a single
 * try would fail one of them.
 */
export function lockTimeoutMs(name: string, value: unknown, fallback = DEFAULT_LOCK_TIMEOUT_MS): number {
  const check = (what: string, v: unknown, shown: unknown): number => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 86400000)
      throw argRangeError(`Expected an integer from 1 to 86400000 (milliseconds) for ${what} but received ${jsonText(shown)}`);
    return v;
  };
  if (value !== undefined) return check(name, value, value);
  const env = process.env.CUDA_MEMORY_LOCK_TIMEOUT_MS;
  if (env !== undefined && env !== '') return check('CUDA_MEMORY_LOCK_TIMEOUT_MS', /^\d+$/.test(env) ? Number(env) : NaN, env);
  return fallback;
}
