/**
 * Whether the dynamic loader will preload the interposer into a command. LD_PRELOAD is honoured
 * by the loader (ld.so) of a dynamically linked program; a static one has none, and a program
 * that the kernel starts in secure-execution mode (AT_SECURE: set-user-ID or set-group-ID to
 * someone else, or file capabilities for a user other than root) has LD_PRELOAD's paths ignored
 * (ld.so(8), "Secure-execution mode"). `cuda-memory run` warns before it starts such a command,
 * since the group's budget will not bind it.
 */
import * as fs from 'fs';
import * as path from 'path';
import { native } from '../binding/native';
import { printable } from '../base/printable';
import type { Environment } from './member';

/** @internal The ids a command starts with (run's own, which its child inherits). */
export interface Identity {
  uid: number;
  euid: number;
  gid: number;
  egid: number;
  groups: number[];
}

/** @internal This process's ids. */
export function currentIdentity(): Identity {
  return {
    uid: process.getuid!(),
    euid: process.geteuid!(),
    gid: process.getgid!(),
    egid: process.getegid!(),
    groups: process.getgroups!(),
  };
}

// The kernel follows at most 4 interpreters (BINPRM_MAX_RECURSION) and reads 256 bytes of a
// script's first line (BINPRM_BUF_SIZE).
const MAX_INTERPRETERS = 4;
const LINE_BYTES = 256;
const PT_INTERP = 3;
// stat(2)'s mode bits: set-user-ID, set-group-ID, group execute.
const S_ISUID = 0o4000;
const S_ISGID = 0o2000;
const S_IXGRP = 0o010;

/**
 * @internal The file `spawn` runs for `command` with this environment: a name with a slash as it
 * stands (from the working folder), else the first executable regular file of that name in
 * env.PATH (an empty entry is the working folder; no PATH: /usr/bin and /bin, as libuv searches).
 * null where there is none, and spawn reports it not found.
 */
export function resolveCommand(command: string, env: Environment): string | null {
  if (command.includes('/')) return path.resolve(command);
  const dirs = (env.PATH ?? '/usr/bin:/bin').split(':');
  for (const d of dirs) {
    const p = path.resolve(d || '.', command);
    if (executable(p)) return p;
  }
  return null;
}

function executable(p: string): boolean {
  try {
    if (!fs.statSync(p).isFile()) return false;
    fs.accessSync(p, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * @internal Why the loader will not preload a library into `command` (resolved as spawn resolves
 * it; a script's `#!` interpreter followed, `env`'s program too), as sentences naming the file,
 * the reason and what to do instead; null where nothing says so (a dynamically linked program
 * run in the ordinary way, or a command that cannot be found or read).
 */
export function preloadObstacle(command: string, env: Environment, who: Identity = currentIdentity()): string | null {
  const file = resolveCommand(command, env);
  return file === null ? null : examine(file, env, who, 0);
}

function examine(file: string, env: Environment, who: Identity, depth: number): string | null {
  let st: fs.Stats;
  let head: Buffer;
  try {
    st = fs.statSync(file);
    head = readAt(file, 0, LINE_BYTES);
  } catch {
    return null; // spawn reports what is wrong with it
  }
  const shown = printable(file);
  if (head[0] === 0x23 && head[1] === 0x21) {
    // A script: the kernel runs its interpreter (the set-ID bits of a script are ignored).
    if (depth >= MAX_INTERPRETERS) return null;
    const line = head.subarray(2).toString('latin1').split('\n')[0].trim();
    const [interpreter, ...rest] = line.split(/[ \t]+/);
    if (!interpreter) return null;
    const why = examine(path.resolve(interpreter), env, who, depth + 1) ?? envProgram(interpreter, rest.join(' '), env, who, depth);
    return why === null
      ? null
      : `${shown} is a script whose #! line starts ${printable(interpreter)}${rest.length ? ' ' + printable(rest.join(' ')) : ''}; ${why}`;
  }
  if (elfInterpreter(file, head) === 'static')
    return `${shown} is linked statically (an ELF executable without a program interpreter, PT_INTERP), so no dynamic loader runs in it to preload the interposer. Link it against the C library dynamically (the CUDA runtime may stay static, as nvcc links it by default)`;
  const secure = secureExecution(file, st, who);
  return secure === null
    ? null
    : `${shown} ${secure[0]}, so the kernel starts it in secure-execution mode, where the loader ignores the paths in LD_PRELOAD and the interposer is not loaded. ${secure[1]}`;
}

// `#!/usr/bin/env [-S] NAME=VALUE... program`: the program env runs, found through PATH.
function envProgram(interpreter: string, arg: string, env: Environment, who: Identity, depth: number): string | null {
  if (path.basename(interpreter) !== 'env' || arg === '') return null;
  // Without -S the kernel passes the rest of the line as one argument.
  const words = arg.startsWith('-S')
    ? arg
        .slice(2)
        .trim()
        .split(/[ \t]+/)
    : [arg];
  const program = words.find((w) => w !== '' && !w.startsWith('-') && !/^[A-Za-z_][A-Za-z0-9_]*=/.test(w));
  const file = program === undefined ? null : resolveCommand(program, env);
  return file === null ? null : examine(file, env, who, depth + 1);
}

function readAt(file: string, offset: number, bytes: number): Buffer {
  const fd = fs.openSync(file, 'r');
  try {
    const b = Buffer.alloc(bytes);
    const n = fs.readSync(fd, b, 0, bytes, offset);
    return b.subarray(0, n);
  } finally {
    fs.closeSync(fd);
  }
}

// 'static' for an ELF executable (ET_EXEC, or ET_DYN: a position-independent one) without a
// PT_INTERP program header, 'dynamic' with one, null for anything else or a header that does not
// read.
function elfInterpreter(file: string, head: Buffer): 'static' | 'dynamic' | null {
  if (head.length < 52 || head.readUInt32BE(0) !== 0x7f454c46) return null;
  const is64 = head[4] === 2;
  const le = head[5] === 1;
  if (head.length < (is64 ? 64 : 52)) return null;
  const u16 = (b: Buffer, o: number) => (le ? b.readUInt16LE(o) : b.readUInt16BE(o));
  const u32 = (b: Buffer, o: number) => (le ? b.readUInt32LE(o) : b.readUInt32BE(o));
  const type = u16(head, 16);
  if (type !== 2 && type !== 3) return null;
  const phoff = is64 ? Number(le ? head.readBigUInt64LE(32) : head.readBigUInt64BE(32)) : u32(head, 28);
  const phentsize = u16(head, is64 ? 54 : 42);
  const phnum = u16(head, is64 ? 56 : 44);
  if (phnum === 0 || phnum === 0xffff || phentsize < 4 || phentsize * phnum > 1 << 20) return null;
  let table: Buffer;
  try {
    table = readAt(file, phoff, phentsize * phnum);
  } catch {
    return null;
  }
  if (table.length < phentsize * phnum) return null;
  for (let i = 0; i < phnum; i++) if (u32(table, i * phentsize) === PT_INTERP) return 'dynamic';
  return 'static';
}

// Whether the kernel starts the file in secure-execution mode for `who`: [why, what to do], or
// null. Its rule for a privilege-elevating exec (security/commoncap.c,
// cap_bprm_creds_from_file): the new effective ids differ from the real ones or from the old
// effective ones (the group: is not one of the caller's), or the file's capabilities give a user
// other than root (by real uid) more than it has.
function secureExecution(file: string, st: fs.Stats, who: Identity): [string, string] | null {
  // On a nosuid mount the kernel ignores both the set-ID bits and the capabilities.
  const honoured = !onNosuidMount(file);
  const setuid = honoured && (st.mode & S_ISUID) !== 0;
  // Set-group-ID without group execute is mandatory locking, not a set-ID program.
  const setgid = honoured && (st.mode & (S_ISGID | S_IXGRP)) === (S_ISGID | S_IXGRP);
  const euid = setuid ? st.uid : who.euid;
  const egid = setgid ? st.gid : who.egid;
  const copy = 'Start a copy of it instead (a copy made with cp has no set-ID bits and no capabilities)';
  if (setuid && (euid !== who.uid || euid !== who.euid)) return [`is set-user-ID to uid ${st.uid}`, copy];
  if (setgid && (egid !== who.gid || !(egid === who.egid || who.groups.includes(egid)))) return [`is set-group-ID to gid ${st.gid}`, copy];
  if (euid !== who.uid || egid !== who.gid)
    return [
      'would start with the real and effective ids of this process, which differ',
      'Run cuda-memory run with equal real and effective ids',
    ];
  if (honoured && who.uid !== 0 && native.fileCapabilities(file) === true)
    return [
      `has file capabilities (the security.capability attribute; getcap ${printable(file)} shows them)`,
      `${copy}, or run it as root`,
    ];
  return null;
}

// Whether the file lies on a mount with the nosuid option, as /proc/self/mountinfo lists this
// process's mounts (the child's too): the mount whose point is the longest prefix of the file's
// real path, the later of two at one point. Unknown (no procfs): false.
function onNosuidMount(file: string): boolean {
  let real: string;
  let table: string;
  try {
    real = fs.realpathSync(file);
    table = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return false;
  }
  let best = '';
  let nosuid = false;
  for (const line of table.split('\n')) {
    const f = line.split(' ');
    if (f.length < 6) continue;
    const point = f[4].replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    const inside = point === '/' || real === point || real.startsWith(point + '/');
    if (inside && point.length >= best.length) {
      best = point;
      nosuid = f[5].split(',').includes('nosuid');
    }
  }
  return nosuid;
}
