/**
 * Reading a file a user names, with a bound: a path may be a device or a pipe that never ends
 * (`/dev/zero`), or a file far larger than anything the reader could parse, and reading it whole
 * would hold the process until memory runs out.
 */
import * as fs from 'fs';
import * as os from 'os';
import { CudaMemoryError } from './errors';
import type { FileCodeTable } from './types';

/** @internal What {@link readBounded} read. */
export type BoundedRead =
  | { ok: true; bytes: Buffer }
  /** More than `maxBytes`: `size` is the file's size, or null for a device or pipe. */
  | { ok: false; size: number | null };

const CHUNK = 1 << 20;

/**
 * @internal Reads at most `maxBytes` of `file`. A regular file larger than that is refused
 * before any read; anything else is read in chunks until it ends or passes the bound. `head`
 * sees the first bytes (up to 4096) as soon as they are in, and may throw to stop early (a
 * binary file need not be read whole to be refused). Errors of the file system (ENOENT,
 * EACCES) are thrown as they are.
 */
export function readBounded(file: string, maxBytes: number, head?: (first: Buffer, size: number | null) => void): BoundedRead {
  const fd = fs.openSync(file, 'r');
  try {
    const st = fs.fstatSync(fd);
    const size = st.isFile() ? st.size : null;
    if (size !== null && size > maxBytes) return { ok: false, size };
    const chunks: Buffer[] = [];
    let total = 0;
    let headSeen = false;
    for (;;) {
      const chunk = Buffer.allocUnsafe(Math.min(CHUNK, maxBytes + 1 - total));
      const n = fs.readSync(fd, chunk, 0, chunk.length, null);
      if (n > 0) {
        chunks.push(n === chunk.length ? chunk : chunk.subarray(0, n));
        total += n;
      }
      if (head && !headSeen && (total >= 4096 || n === 0)) {
        headSeen = true;
        const all = Buffer.concat(chunks, total);
        head(all.subarray(0, 4096), size);
      }
      if (total > maxBytes) return { ok: false, size };
      if (n === 0) return { ok: true, bytes: Buffer.concat(chunks, total) };
    }
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The codes of the library's file errors by errno name: the one table of them, for both languages.
 * fileError codes Node's fs errors from it, and the addon codes its own from it: the loader hands
 * it over at init ({@link fileCodeTable}, keyed by the errno values of this platform), and
 * native/transfer/files/ keeps no codes of its own. The table lives here rather than in C++
 * because fileError must work where the addon does not load (readSafetensorsHeader and the
 * storage rows of bench-files need none), and a table in TypeScript needs no step at build time.
 */
const FILE_CODES: Record<string, string> = {
  ENOENT: 'ERR_FILE_NOT_FOUND',
  ENOTDIR: 'ERR_FILE_NOT_FOUND',
  EACCES: 'ERR_FILE_PERMISSION',
  EPERM: 'ERR_FILE_PERMISSION',
  EROFS: 'ERR_FILE_PERMISSION',
  EISDIR: 'ERR_FILE_IS_DIRECTORY',
  ENOSPC: 'ERR_FILE_NO_SPACE',
  EDQUOT: 'ERR_FILE_NO_SPACE',
  EFBIG: 'ERR_FILE_NO_SPACE',
};
// The code of every other errno.
const OTHER_FILE_CODE = 'ERR_FILE_IO';

/** @internal The table above by the errno values of this platform, as the addon takes it. */
export function fileCodeTable(): FileCodeTable {
  const values = os.constants.errno as Record<string, number | undefined>;
  const byErrno: [number, string][] = [];
  for (const [name, code] of Object.entries(FILE_CODES)) {
    const value = values[name];
    if (value !== undefined) byErrno.push([value, code]);
  }
  return { byErrno, otherwise: OTHER_FILE_CODE };
}

/**
 * @internal A Node fs error as the library's coded file error (`code` ERR_FILE_..., with `path`,
 * `syscall` and the errno name as `errno`, as the addon's); anything else is returned as it is.
 */
export function fileError(e: Error & { code?: string; syscall?: string }, path: string): Error {
  if (!e || typeof e.code !== 'string' || e instanceof CudaMemoryError) return e;
  const err = new CudaMemoryError(e.message, FILE_CODES[e.code] ?? OTHER_FILE_CODE);
  return Object.assign(err, { path, syscall: e.syscall, errno: e.code });
}

// What a file operation's errno means to the user, and what to do about it.
const FILE_PROBLEMS: Record<string, [what: string, todo: string]> = {
  ENOENT: ['it does not exist', 'check the path'],
  ENOTDIR: ['a part of its path is not a folder', 'check the path'],
  EACCES: ['permission denied', 'check its owner and mode, or choose another path'],
  EPERM: ['the operation is not permitted', 'check its owner and mode, or choose another path'],
  EROFS: ['its file system is read-only', 'choose a path on a writable file system'],
  EISDIR: ['it is a folder', 'name a file'],
  EEXIST: ['something other than a folder is already there', 'choose another path'],
  ENOSPC: ['its file system has no space left', 'free space there, or choose another path'],
  EDQUOT: ['the disk quota is used up', 'free space there, or choose another path'],
  EFBIG: ['the file would be too large for its file system', 'choose another path'],
  EIO: [
    'the device reported an input/output error',
    'check the device and its file system (the kernel log says more), or choose another path',
  ],
  ENXIO: ['no device answers at that path', 'check the path'],
  EBUSY: ['it is busy', 'try again once it is free, or choose another path'],
};

/**
 * @internal A sentence for a failed file operation: what was done to which file, what went wrong
 * in words (with the errno name, as the system said it), and what to do, e.g. "cannot read /tmp:
 * it is a folder (EISDIR); name a file". An error without an errno gives its message.
 */
export function fileProblem(e: unknown, operation: string, file: string): string {
  const err = e as { code?: unknown; errno?: unknown; message?: unknown };
  const name = typeof err?.errno === 'string' ? err.errno : typeof err?.code === 'string' ? err.code : undefined;
  const known = name !== undefined ? FILE_PROBLEMS[name] : undefined;
  if (known) return `cannot ${operation} ${file}: ${known[0]} (${name}); ${known[1]}`;
  const message = typeof err?.message === 'string' ? err.message : String(e);
  return `cannot ${operation} ${file}: ${message}`;
}
