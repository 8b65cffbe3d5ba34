'use strict';
// scripts/files-vs-torch.js without a GPU (--host) and without PyTorch: a stand-in for the Python
// co-process answers its requests, so the turn-taking, the table, the goals and the exit status
// are checked here; the real PyTorch side runs on the GPU machine.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { root } = require('../helpers');

const script = path.join(root, 'scripts', 'files-vs-torch.js');

// A stand-in for `python3 files-vs-torch.py PATH DIGESTS`: ready line, then one answer a request,
// logging each request to LOG. MISMATCH=1 makes every timed pass report a wrong tensor; HANG=1
// makes each timed pass take 30 s.
function standIn(dir) {
  const p = path.join(dir, 'python');
  fs.writeFileSync(
    p,
    `#!/bin/sh
echo '{"torch": "stand-in", "safetensors": "stand-in", "gpu": "none"}'
while read req; do
  echo "$req" >> "$LOG"
  case "$req" in
    warmup) echo '{"seconds": 0.25, "mismatched": []}' ;;
    cold|warm) if [ "$HANG" = 1 ]; then sleep 30; fi; if [ "$MISMATCH" = 1 ]; then echo '{"seconds": 0.5, "mismatched": ["layers.0.bias"]}'; else echo '{"seconds": 0.5, "mismatched": []}'; fi ;;
    *) echo '{"error": "unknown request"}' ;;
  esac
done
`,
    { mode: 0o755 },
  );
  return p;
}

function run(dir, env = {}, extra = []) {
  const log = path.join(dir, 'requests.log');
  const r = spawnSync(process.execPath, [script, '--dir', dir, '--gib', '0.004', '--passes', '3', '--host', ...extra], {
    encoding: 'utf8',
    env: { ...process.env, PYTHON: standIn(dir), LOG: log, OUT: dir, ...env },
  });
  const requests = fs.existsSync(log) ? fs.readFileSync(log, 'utf8').trim().split('\n') : [];
  return { ...r, requests };
}

describe('files-vs-torch', () => {
  let dir;
  beforeEach(() => (dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cm-fvt-'))));
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('every loader runs each pass, PyTorch one request a pass and a warm-up before the warm passes', () => {
    const r = run(dir);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.requests).toEqual(['cold', 'cold', 'cold', 'warmup', 'warm', 'warm', 'warm']);
    const report = JSON.parse(fs.readFileSync(path.join(dir, 'files-vs-torch.json'), 'utf8'));
    const rows = report.rows.map((x) => `${x.loader} ${x.cache} ${x.seconds.length} ${x.verified}`);
    expect(rows).toEqual([
      'storage cold 3 true',
      'library cold 3 true',
      'naive cold 3 true',
      'torch cold 3 true',
      'storage warm 3 true',
      'library warm 3 true',
      'naive warm 3 true',
      'torch warm 3 true',
    ]);
    const torch = report.rows.find((x) => x.loader === 'torch' && x.cache === 'warm');
    expect(torch.seconds).toEqual([0.5, 0.5, 0.5]);
    expect(torch.versions).toEqual({ torch: 'stand-in', safetensors: 'stand-in' });
    // The library's rows say whether they read with O_DIRECT.
    expect(typeof report.rows.find((x) => x.loader === 'library').direct).toBe('boolean');
    expect(report.goals.map((g) => g.goal)).toEqual(
      expect.arrayContaining(['cold: library >= 2x torch', 'warm: library >= 90% of min(storage, link)']),
    );
    // The checkpoint's folder is gone.
    expect(fs.readdirSync(dir).filter((n) => n.startsWith('files-vs-torch-'))).toEqual([]);
  });

  test('a mismatched tensor fails the run and is named; a PyTorch that cannot start is a failed row', () => {
    const bad = run(dir, { MISMATCH: '1' });
    expect(bad.status).toBe(1);
    const report = JSON.parse(fs.readFileSync(path.join(dir, 'files-vs-torch.json'), 'utf8'));
    const torch = report.rows.find((x) => x.loader === 'torch' && x.cache === 'cold');
    expect(torch).toMatchObject({ verified: false, mismatched: ['layers.0.bias'] });
    const none = run(dir, { PYTHON: '/bin/false' });
    expect(none.status).toBe(1);
    expect(none.stdout).toMatch(/torch\s+cold\s+-\s+-\s+NO\s+error: PyTorch exited/);
    expect(none.stdout).toMatch(/storage\s+warm/);
  });

  test('a PyTorch that stops answering ends the run within the time allowed, and the folder is cleaned', () => {
    const t0 = Date.now();
    const r = run(dir, { HANG: '1', FILES_VS_TORCH_ANSWER_SECONDS: '1' });
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/PyTorch gave no answer within 1 s/);
    expect(Date.now() - t0).toBeLessThan(20000);
    expect(fs.readdirSync(dir).filter((n) => n.startsWith('files-vs-torch-'))).toEqual([]);
  });
});
