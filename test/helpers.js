'use strict';
// Shared test helpers. GPU tests go through describeGpu: without a usable device they are
// skipped with the reason printed; with REQUIRE_GPU=1 the missing device is a failure instead.
const fs = require('fs');
const os = require('os');
const path = require('path');

// The package under test: this checkout, or an installed copy (CUDA_MEMORY_PACKAGE=/app/node_modules/
// cuda-memory), so that the suites can check a tarball installed the way users install it.
const root = process.env.CUDA_MEMORY_PACKAGE ? path.resolve(process.env.CUDA_MEMORY_PACKAGE) : path.join(__dirname, '..');
const cm = require(root);
// The package's other entry points, as its exports map names them: cuda-memory/bench, /metrics, /testing.
const entry = (name) => require(path.join(root, require(path.join(root, 'package.json')).exports[`./${name}`].require.default));
const bench = entry('bench');
const metrics = entry('metrics');
const testing = entry('testing');

const st = cm.status();
const requireGpu = process.env.REQUIRE_GPU === '1';
const gpu = st.available;

function describeGpu(name, fn) {
  if (gpu) return describe(`[GPU] ${name}`, fn);
  if (requireGpu) {
    return describe(`[GPU] ${name}`, () => {
      test('needs a GPU (REQUIRE_GPU=1)', () => {
        throw new Error(`REQUIRE_GPU=1 but CUDA is not available: ${st.reason}: ${st.message}`);
      });
    });
  }
  // A visible reason, in the test name itself.
  return describe.skip(`[GPU] ${name} — skipped: no GPU (${st.reason}: ${st.message})`, fn);
}

const gpuCount = gpu ? st.deviceCount : 0;

// Tests of two or more GPUs: skipped with the count of devices here, failing under REQUIRE_GPUS=2.
function describeTwoGpus(name, fn) {
  if (gpuCount >= 2) return describe(`[2 GPUs] ${name}`, fn);
  if (process.env.REQUIRE_GPUS === '2')
    return describe(`[2 GPUs] ${name}`, () => test('needs two GPUs (REQUIRE_GPUS=2)', () => expect(gpuCount).toBeGreaterThanOrEqual(2)));
  return describe.skip(`[2 GPUs] ${name} — skipped: ${gpuCount} device${gpuCount === 1 ? '' : 's'} here`, fn);
}

// Deterministic pseudo-random bytes (xorshift32), different for each seed.
/** An allocator on a simulated 80 GiB device (the H100's size); `device` overrides its fields. */
function simAllocator(opts = {}, device = {}) {
  return cm.createAllocator({ ...opts, simulate: { totalBytes: 80 * 2 ** 30, ...device } });
}

function randomBytes(n, seed = 1) {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 0x9e3779b9;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = x & 0xff;
  }
  return out;
}

function rng(seed = 12345) {
  let x = seed >>> 0;
  return (n) => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return n === undefined ? x / 4294967296 : x % n;
  };
}

// A new temporary folder, removed with everything in it when the test file ends (a test file that
// leaves anything in the temporary folder fails the run: test/reporters/tmpdir.js).
const tempDirs = [];
if (typeof afterAll === 'function') afterAll(() => tempDirs.splice(0).forEach((d) => fs.rmSync(d, { recursive: true, force: true })));
function tempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

// A new temporary folder that every user can enter, for what another user must reach (a process
// run with setpriv, a Slurm job of another uid), removed as tempDir's are. It goes under the first
// of os.tmpdir() and /tmp that every user can enter: the run's TMPDIR (test/reporters/tmpdir.js)
// and a CI clone sit in folders only this user can enter, since `mktemp -d` makes them 0700.
const everyoneEnters = (d) => {
  for (let p = path.resolve(d); ; p = path.dirname(p)) {
    if ((fs.statSync(p).mode & 0o001) === 0) return false;
    if (p === path.dirname(p)) return true;
  }
};
function openTempDir(prefix) {
  const open = [os.tmpdir(), '/tmp'].find((d) => fs.existsSync(d) && everyoneEnters(d));
  if (!open) throw new Error(`no temporary folder every user can enter (${os.tmpdir()}, /tmp) for what another user runs`);
  const dir = fs.mkdtempSync(path.join(open, prefix));
  tempDirs.push(dir);
  return dir;
}

// Makes `p` and everything under it readable by every user, and its folders enterable, whatever
// the umask made them; writable by its owner only. A link is left as it is: what it points to is
// not the copy's.
function readableByAll(p) {
  const st = fs.lstatSync(p);
  if (st.isSymbolicLink()) return;
  fs.chmodSync(p, st.isDirectory() ? 0o755 : ((st.mode & 0o777) | 0o444) & ~0o022);
  if (st.isDirectory()) for (const e of fs.readdirSync(p)) readableByAll(path.join(p, e));
}

// What another user runs of the package, made once per test file in an openTempDir: dist/,
// package.json, the addon this suite loaded and the interposer it would preload (where they are
// built) in build/Release/, and the package's dependencies (node-gyp-build, which the loader
// asks for the prebuilt binary; commander, for the CLI). `env` points CUDA_MEMORY_ADDON and
// CUDA_MEMORY_PRELOAD, which may name files in the checkout, at the copy's.
let forOtherUsers;
function packageForOtherUsers() {
  if (forOtherUsers) return forOtherUsers;
  const copy = openTempDir('cuda-memory-other-user-');
  fs.cpSync(path.join(root, 'dist'), path.join(copy, 'dist'), { recursive: true, dereference: true });
  fs.copyFileSync(path.join(root, 'package.json'), path.join(copy, 'package.json'));
  const release = path.join(copy, 'build', 'Release');
  fs.mkdirSync(release, { recursive: true });
  const env = {
    CUDA_MEMORY_ADDON: path.join(release, 'cuda_memory.node'),
    CUDA_MEMORY_PRELOAD: path.join(release, 'cuda_memory_preload.so'),
  };
  const { addonPath } = require(path.join(root, 'dist', 'binding', 'native'));
  if (addonPath) fs.copyFileSync(addonPath, env.CUDA_MEMORY_ADDON);
  try {
    fs.copyFileSync(require(path.join(root, 'dist', 'allocator', 'member')).findPreloadLibrary(root, process.env), env.CUDA_MEMORY_PRELOAD);
  } catch {
    // not built: the copy has none either, and the copy's processes say so (ERR_PRELOAD_NOT_FOUND)
  }
  // Each dependency where Node finds it from the package (an installed package's may be hoisted).
  for (const dep of Object.keys(require(path.join(root, 'package.json')).dependencies ?? {})) {
    let from = root;
    while (!fs.existsSync(path.join(from, 'node_modules', dep, 'package.json')) && from !== path.dirname(from)) from = path.dirname(from);
    fs.cpSync(path.join(from, 'node_modules', dep), path.join(copy, 'node_modules', dep), { recursive: true, dereference: true });
  }
  readableByAll(copy);
  forOtherUsers = { root: copy, env };
  return forOtherUsers;
}

// Byte-for-byte equality of two views.
function same(a, b) {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.byteLength), Buffer.from(b.buffer, b.byteOffset, b.byteLength)) === 0;
}

// Runs a shell script in a private mount namespace (unshare -m, root only), where a test may
// unmount /proc or mount a small or read-only tmpfs without touching the machine's mounts.
function inPrivateMounts(script, options = {}) {
  return require('child_process').execFileSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', script], options);
}

// Whether `probe` succeeds there: the tests that need it skip, saying so, where it does not.
function privateMountsWork(probe) {
  try {
    inPrivateMounts(probe, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

// structuredClone and postMessage (through `port`) of each [value, what] throw ERR_NOT_CLONEABLE
// naming `what` ("a DeviceBuffer").
function expectNotCloneable(port, cases) {
  for (const [value, what] of cases) {
    const refused = expect.objectContaining({
      name: 'CudaMemoryError',
      code: 'ERR_NOT_CLONEABLE',
      message: expect.stringMatching(new RegExp(`^${what} cannot be cloned or sent to another thread \\(structuredClone, postMessage\\)`)),
    });
    expect(() => structuredClone(value)).toThrow(refused);
    expect(() => port.postMessage(value)).toThrow(refused);
  }
}

// What fn() throws as "CODE: message", or 'returned' when it throws nothing.
function thrown(fn) {
  try {
    fn();
  } catch (e) {
    return `${e.code}: ${e.message}`;
  }
  return 'returned';
}

// Parses an XML document, or throws saying where it is not well-formed (XML 1.0: one root
// element; tags nested and closed; attributes quoted, each once; `<` and `&` only as markup or
// references; no control characters). Returns the root as { name, attrs, children, text }, text
// being the element's own character data, references resolved. For reports such as JUnit files.
function parseXml(xml) {
  let i = 0;
  const fail = (what) => {
    const line = xml.slice(0, i).split('\n').length;
    throw new Error(`not well-formed XML at line ${line}: ${what} (near ${JSON.stringify(xml.slice(i, i + 40))})`);
  };
  const bad = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/.exec(xml);
  if (bad) {
    i = bad.index;
    fail(`the character U+${bad[0].charCodeAt(0).toString(16).padStart(4, '0')}`);
  }
  const NAME = /[A-Za-z_:][\w.:-]*/y;
  const name = () => {
    NAME.lastIndex = i;
    const m = NAME.exec(xml);
    if (!m) fail('expected a name');
    i += m[0].length;
    return m[0];
  };
  const space = () => {
    while (/\s/.test(xml[i] ?? '')) i++;
  };
  const text = (s) => {
    if (s.includes('<')) fail('a "<" in character data');
    return s.replace(/&([^;]*);|&/g, (ref, body) => {
      if (body === undefined) fail('a "&" that starts no reference');
      const named = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" }[body];
      if (named) return named;
      const n = /^#x[0-9a-f]+$/i.test(body) ? parseInt(body.slice(2), 16) : /^#\d+$/.test(body) ? Number(body.slice(1)) : NaN;
      if (!Number.isFinite(n)) fail(`the reference ${ref}`);
      return String.fromCodePoint(n);
    });
  };
  // Comments, processing instructions and white space between elements.
  const misc = () => {
    for (;;) {
      space();
      if (xml.startsWith('<!--', i)) {
        const end = xml.indexOf('-->', i + 4);
        if (end < 0 || xml.slice(i + 4, end).includes('--')) fail('a comment');
        i = end + 3;
      } else if (xml.startsWith('<?', i)) {
        const end = xml.indexOf('?>', i);
        if (end < 0) fail('a processing instruction');
        i = end + 2;
      } else return;
    }
  };
  const element = () => {
    if (xml[i] !== '<') fail('expected an element');
    i++;
    const el = { name: name(), attrs: {}, children: [], text: '' };
    for (;;) {
      space();
      if (xml.startsWith('/>', i)) {
        i += 2;
        return el;
      }
      if (xml[i] === '>') break;
      const attr = name();
      space();
      if (xml[i] !== '=') fail(`expected = after ${attr}`);
      i++;
      space();
      const q = xml[i];
      if (q !== '"' && q !== "'") fail(`expected a quoted value for ${attr}`);
      const end = xml.indexOf(q, i + 1);
      if (end < 0) fail(`an unclosed value of ${attr}`);
      if (attr in el.attrs) fail(`a second ${attr}`);
      el.attrs[attr] = text(xml.slice(i + 1, end));
      i = end + 1;
    }
    i++;
    for (;;) {
      const next = xml.indexOf('<', i);
      if (next < 0) fail(`an unclosed <${el.name}>`);
      el.text += text(xml.slice(i, next));
      i = next;
      if (xml.startsWith('</', i)) {
        i += 2;
        if (name() !== el.name) fail(`a closing tag that is not </${el.name}>`);
        space();
        if (xml[i] !== '>') fail('expected >');
        i++;
        return el;
      }
      if (xml.startsWith('<![CDATA[', i)) {
        const end = xml.indexOf(']]>', i);
        if (end < 0) fail('an unclosed CDATA section');
        el.text += xml.slice(i + 9, end);
        i = end + 3;
      } else if (xml.startsWith('<!--', i) || xml.startsWith('<?', i)) misc();
      else el.children.push(element());
    }
  };
  if (xml.charCodeAt(0) === 0xfeff) i = 1;
  misc();
  const root = element();
  misc();
  if (i < xml.length) fail('content after the root element');
  return root;
}

// Every element named `name` in the tree under `el`, in document order.
function xmlElements(el, name) {
  return [...(el.name === name ? [el] : []), ...el.children.flatMap((c) => xmlElements(c, name))];
}

// A measurement script's checks (scripts/*-run.js): a run built to pass fails none, and each case,
// one fault put into a fresh passing run, fails exactly the check whose name matches its pattern.
function expectEachFaultFailsItsCheck(passing, checksOf, cases) {
  const failed = (r) =>
    checksOf(r)
      .filter((c) => !c.pass)
      .map((c) => c.name);
  expect(failed(passing())).toEqual([]);
  for (const [breakIt, name] of cases) {
    const r = passing();
    breakIt(r);
    const f = failed(r);
    expect(f).toHaveLength(1);
    expect(f[0]).toMatch(name);
  }
}

module.exports = {
  expectEachFaultFailsItsCheck,
  parseXml,
  xmlElements,
  cm,
  bench,
  metrics,
  testing,
  root,
  st,
  gpu,
  gpuCount,
  requireGpu,
  describeGpu,
  describeTwoGpus,
  simAllocator,
  randomBytes,
  rng,
  same,
  inPrivateMounts,
  privateMountsWork,
  tempDir,
  openTempDir,
  readableByAll,
  packageForOtherUsers,
  expectNotCloneable,
  thrown,
};
