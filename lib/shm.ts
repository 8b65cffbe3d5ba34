/**
 * Where files that processes share live: `CUDA_MEMORY_SHM_DIR`, or /dev/shm (a tmpfs on Linux).
 * Every cooperating process must see the same folder.
 */
export function shmDir(): string {
  return process.env.CUDA_MEMORY_SHM_DIR || '/dev/shm';
}

const NAME = /^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$/;

/** @internal Checks a name that becomes part of a file name. */
export function checkShmName(what: string, name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name))
    throw new TypeError(
      `Expected 1 to 64 of A-Z a-z 0-9 . _ - (not starting with a dot) for ${what} but received ${typeof name === 'string' ? JSON.stringify(name) : typeof name}`,
    );
  return name;
}
