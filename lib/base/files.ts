/**
 * Reading a file a user names, with a bound: a path may be a device or a pipe that never ends
 * (`/dev/zero`), or a file far larger than anything the reader could parse, and reading it whole
 * would hold the process until memory runs out.
 */
import * as fs from 'fs';
import { CudaMemoryError } from './errors';

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

// The codes of the native file errors (native/transfer/files.cc, FromErrno), for Node's.
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

/**
 * @internal A Node fs error as the library's coded file error (`code` ERR_FILE_..., with `path`,
 * `syscall` and the errno name as `errno`, as the addon's); anything else is returned as it is.
 */
export function fileError(e: Error & { code?: string; syscall?: string }, path: string): Error {
  if (!e || typeof e.code !== 'string' || e instanceof CudaMemoryError) return e;
  const err = new CudaMemoryError(e.message, FILE_CODES[e.code] ?? 'ERR_FILE_IO');
  return Object.assign(err, { path, syscall: e.syscall, errno: e.code });
}
