'use strict';
// Whether the loader will preload the interposer into a command (lib/allocator/loader.ts), with
// real files: set-user-ID and set-group-ID copies given to another uid (root), file capabilities
// (setcap), static programs (gcc -static), scripts and their interpreters, a nosuid mount.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
const { root, tempDir, inPrivateMounts, privateMountsWork } = require('../helpers');
const { preloadObstacle, resolveCommand, currentIdentity } = require(path.join(root, 'dist', 'allocator', 'loader'));
const { native } = require(path.join(root, 'dist', 'binding', 'native'));

const dir = tempDir('cm-loader-');
fs.chmodSync(dir, 0o755);
const asRoot = process.geteuid() === 0;
const user = { uid: 1000, euid: 1000, gid: 1000, egid: 1000, groups: [] };
const cc = (args) => spawnSync('cc', args, { encoding: 'utf8' });
const src = path.join(dir, 'p.c');
fs.writeFileSync(src, '#include <stdio.h>\nint main(void) { puts("started"); return 0; }\n');

// A dynamically linked program built here, copied to `name` with `mode` and owner.
const dynamic = path.join(dir, 'dynamic');
const built = cc(['-o', dynamic, src]).status === 0;
function copy(name, mode, uid = process.geteuid(), gid = process.getegid(), from = dynamic, where = dir) {
  const p = path.join(where, name);
  fs.copyFileSync(from, p);
  fs.chownSync(p, uid, gid);
  fs.chmodSync(p, mode); // after chown, which clears the set-ID bits
  return p;
}
const statik = path.join(dir, 'static');
const staticBuilt = built && cc(['-static', '-o', statik, src]).status === 0;
const staticPie = path.join(dir, 'static-pie');
const staticPieBuilt = built && cc(['-static-pie', '-fPIE', '-o', staticPie, src]).status === 0;
const setcap = spawnSync('setcap', ['-v', 'cap_net_raw+ep', '/nonexistent']).error === undefined;

const when = (ok, why) => (ok ? test : (name, fn) => test.skip(`${name} — skipped: ${why}`, fn));

describe('resolveCommand: the file spawn runs', () => {
  when(built, 'no C compiler')(
    'a name through PATH, skipping what is not an executable file; a path as it stands; none found: null',
    () => {
      const a = tempDir('cm-loader-a-');
      const b = tempDir('cm-loader-b-');
      fs.writeFileSync(path.join(a, 'prog'), 'not executable'); // mode 0644: skipped
      fs.mkdirSync(path.join(a, 'sub'));
      fs.copyFileSync(dynamic, path.join(b, 'prog'));
      fs.chmodSync(path.join(b, 'prog'), 0o755);
      expect(resolveCommand('prog', { PATH: `${a}:${b}` })).toBe(path.join(b, 'prog'));
      expect(resolveCommand('sub', { PATH: a })).toBeNull();
      expect(resolveCommand('missing-program', { PATH: `${a}:${b}` })).toBeNull();
      expect(resolveCommand('./x/../prog', {})).toBe(path.resolve('prog'));
      expect(resolveCommand(path.join(b, 'prog'), { PATH: '' })).toBe(path.join(b, 'prog'));
    },
  );
});

describe('preloadObstacle', () => {
  when(built, 'no C compiler')('a dynamically linked program run plainly, or a command not found: no obstacle', () => {
    expect(preloadObstacle(dynamic, process.env)).toBeNull();
    expect(preloadObstacle(process.execPath, process.env)).toBeNull();
    expect(preloadObstacle('no-such-program-here', { PATH: dir })).toBeNull();
  });

  when(staticBuilt, 'no static C library (gcc -static)')('a static program: no loader runs in it', () => {
    expect(preloadObstacle(statik, process.env)).toBe(
      `${statik} is linked statically (an ELF executable without a program interpreter, PT_INTERP), so no dynamic loader runs in it to preload the interposer. Link it against the C library dynamically (the CUDA runtime may stay static, as nvcc links it by default)`,
    );
    if (staticPieBuilt) expect(preloadObstacle(staticPie, process.env)).toMatch(/ is linked statically /);
  });

  when(built && asRoot, 'needs root, to give files to another uid')(
    'set-user-ID or set-group-ID to someone else: secure-execution mode',
    () => {
      const secure =
        'so the kernel starts it in secure-execution mode, where the loader ignores the paths in LD_PRELOAD and the interposer is not loaded. Start a copy of it instead (a copy made with cp has no set-ID bits and no capabilities)';
      const theirs = copy('setuid-nobody', 0o4755, 65534, 65534);
      expect(preloadObstacle(theirs, process.env)).toBe(`${theirs} is set-user-ID to uid 65534, ${secure}`);
      const group = copy('setgid-nogroup', 0o2755, 0, 65534);
      expect(preloadObstacle(group, process.env)).toBe(`${group} is set-group-ID to gid 65534, ${secure}`);
      // Set-ID to whom the caller already is changes nothing: root running a set-user-ID root
      // program keeps LD_PRELOAD. Another user running it does not.
      const mine = copy('setuid-root', 0o6755, 0, 0);
      expect(preloadObstacle(mine, process.env)).toBeNull();
      expect(preloadObstacle(mine, process.env, user)).toBe(`${mine} is set-user-ID to uid 0, ${secure}`);
      // A set-group-ID group the caller is in (a supplementary one) changes nothing either; set-group-ID
      // without group execute is mandatory locking, not a set-ID program.
      expect(preloadObstacle(group, process.env, { ...user, uid: 0, euid: 0, groups: [65534] })).toMatch(/set-group-ID to gid 65534/); // not the real gid
      expect(preloadObstacle(copy('setgid-noexec', 0o2745, 0, 65534), process.env)).toBeNull();
      // A caller whose real and effective ids differ starts everything in secure-execution mode.
      expect(preloadObstacle(dynamic, process.env, { ...user, euid: 0 })).toMatch(
        /would start with the real and effective ids of this process, which differ/,
      );
    },
  );

  when(built && asRoot && setcap, 'needs root and setcap (libcap2-bin)')(
    'file capabilities: secure-execution mode for a user other than root',
    () => {
      const capable = copy('capable', 0o755);
      expect(spawnSync('setcap', ['cap_net_raw+ep', capable]).status).toBe(0);
      expect(native.fileCapabilities(capable)).toBe(true);
      expect(native.fileCapabilities(dynamic)).toBe(false);
      expect(native.fileCapabilities(path.join(dir, 'missing'))).toBeNull();
      expect(preloadObstacle(capable, process.env, user)).toBe(
        `${capable} has file capabilities (the security.capability attribute; getcap ${capable} shows them), so the kernel starts it in secure-execution mode, where the loader ignores the paths in LD_PRELOAD and the interposer is not loaded. Start a copy of it instead (a copy made with cp has no set-ID bits and no capabilities), or run it as root`,
      );
      expect(preloadObstacle(capable, process.env, { ...currentIdentity(), uid: 0, euid: 0 })).toBeNull(); // root's own
    },
  );

  when(staticBuilt, 'no static C library (gcc -static)')(
    'a script: its interpreter, env’s program through PATH, an interpreter that is a script',
    () => {
      const bin = tempDir('cm-loader-path-');
      fs.copyFileSync(statik, path.join(bin, 'static-tool'));
      fs.chmodSync(path.join(bin, 'static-tool'), 0o755);
      const script = (name, line) => {
        const p = path.join(dir, name);
        fs.writeFileSync(p, `${line}\necho never\n`, { mode: 0o755 });
        return p;
      };
      const direct = script('direct', `#!${statik} -x`);
      expect(preloadObstacle(direct, process.env)).toBe(
        `${direct} is a script whose #! line starts ${statik} -x; ${statik} is linked statically (an ELF executable without a program interpreter, PT_INTERP), so no dynamic loader runs in it to preload the interposer. Link it against the C library dynamically (the CUDA runtime may stay static, as nvcc links it by default)`,
      );
      const env = { PATH: `${bin}:/usr/bin:/bin` };
      const viaEnv = script('via-env', '#!/usr/bin/env -S LANG=C static-tool --flag');
      expect(preloadObstacle(viaEnv, env)).toMatch(
        new RegExp(
          `^${viaEnv} is a script whose #! line starts /usr/bin/env -S LANG=C static-tool --flag; ${bin}/static-tool is linked statically `,
        ),
      );
      // Without -S the rest of the line is one argument: env looks for a program of that name.
      expect(preloadObstacle(script('one-word', '#!/usr/bin/env static-tool --flag'), env)).toBeNull();
      expect(preloadObstacle(script('env-plain', '#!/usr/bin/env static-tool'), env)).toMatch(/static-tool is linked statically/);
      const nested = script('nested', `#!${direct}`);
      expect(preloadObstacle(nested, process.env)).toMatch(
        new RegExp(
          `^${nested} is a script whose #! line starts ${direct}; ${direct} is a script whose #! line starts ${statik} -x; ${statik} is linked statically`,
        ),
      );
      expect(preloadObstacle(script('shell', '#!/bin/sh'), process.env)).toBeNull();
      expect(preloadObstacle(script('python', '#!/usr/bin/env python3'), process.env)).toBeNull();
      // The command by name, as spawn finds it.
      expect(preloadObstacle('static-tool', env)).toMatch(new RegExp(`^${bin}/static-tool is linked statically`));
    },
  );

  // The loader's own answer: a library whose constructor names the program it was loaded into,
  // preloaded into each program as root and as another user (setpriv, which is preloaded too and
  // so named apart); the obstacle is null exactly where it loaded. In a folder the other user
  // can reach (this run's temporary folder is root's alone), removed at the end.
  const canSwitch = asRoot && built && spawnSync('setpriv', ['--version']).status === 0;
  when(canSwitch, 'needs root, setpriv and a C compiler')('agrees with the loader on every case, as root and as another user', () => {
    const open = fs.mkdtempSync(path.join(path.dirname(require('os').tmpdir()), 'cm-loader-agree-'));
    try {
      fs.chmodSync(open, 0o755);
      const probe = path.join(open, 'probe.so');
      fs.writeFileSync(
        path.join(open, 'probe.c'),
        `#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void said(void) {
  char exe[4096] = {0};
  if (readlink("/proc/self/exe", exe, sizeof exe - 1) > 0) fprintf(stderr, "preloaded into %s\\n", exe);
}
`,
      );
      expect(cc(['-shared', '-fPIC', '-o', probe, path.join(open, 'probe.c')]).status).toBe(0);
      fs.chmodSync(probe, 0o755);
      const files = [
        copy('dynamic', 0o755, 0, 0, dynamic, open),
        copy('setuid-nobody', 0o4755, 65534, 65534, dynamic, open),
        copy('setgid-nogroup', 0o2755, 0, 65534, dynamic, open),
        copy('setuid-root', 0o4755, 0, 0, dynamic, open),
        copy('setgid-root', 0o2755, 0, 0, dynamic, open),
      ];
      if (staticBuilt) files.push(copy('static', 0o755, 0, 0, statik, open));
      if (setcap) {
        const capable = copy('capable', 0o755, 0, 0, dynamic, open);
        expect(spawnSync('setcap', ['cap_net_raw+ep', capable]).status).toBe(0);
        files.push(capable);
      }
      for (const [who, prefix] of [
        [currentIdentity(), []],
        [user, ['setpriv', '--reuid', '1000', '--regid', '1000', '--clear-groups']],
      ]) {
        const seen = new Set();
        for (const file of files) {
          const argv = [...prefix, file];
          const r = spawnSync(argv[0], argv.slice(1), { encoding: 'utf8', env: { ...process.env, LD_PRELOAD: probe } });
          expect({ file, uid: who.uid, stdout: r.stdout }).toEqual({ file, uid: who.uid, stdout: 'started\n' });
          const preloaded = r.stderr.includes(`preloaded into ${file}\n`);
          expect({ file, uid: who.uid, preloaded, obstacle: preloadObstacle(file, process.env, who) !== null }).toEqual({
            file,
            uid: who.uid,
            preloaded,
            obstacle: !preloaded,
          });
          seen.add(preloaded);
        }
        expect([...seen].sort()).toEqual([false, true]); // both answers, for each user
      }
    } finally {
      fs.rmSync(open, { recursive: true, force: true });
    }
  });

  // On a nosuid mount the kernel ignores set-ID bits and capabilities: nothing to warn about.
  const mounts = asRoot && built && privateMountsWork('d=$(mktemp -d) && mount -t tmpfs -o nosuid tmpfs "$d" && umount "$d" && rmdir "$d"');
  when(mounts, 'needs root and unshare -m to mount a tmpfs')('a set-user-ID program on a nosuid mount keeps LD_PRELOAD', () => {
    const where = tempDir('cm-loader-mnt-');
    const check = `const { preloadObstacle } = require(${JSON.stringify(path.join(root, 'dist', 'allocator', 'loader'))}); console.log(JSON.stringify(preloadObstacle(process.argv[1], process.env)));`;
    const script = (options) =>
      `mount -t tmpfs -o ${options} tmpfs "${where}" && cp "${dynamic}" "${where}/p" && chown 65534:65534 "${where}/p" && chmod 4755 "${where}/p" && "${process.execPath}" -e '${check}' "${where}/p"`;
    expect(JSON.parse(inPrivateMounts(script('nosuid'), { encoding: 'utf8' }))).toBeNull();
    expect(JSON.parse(inPrivateMounts(script('suid'), { encoding: 'utf8' }))).toMatch(/is set-user-ID to uid 65534/);
  });
});
