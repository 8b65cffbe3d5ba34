'use strict';
// The command line's exit codes, as the README gives them: 0 success, 1 a failed gate or check,
// 2 a usage error or no CUDA; arguments and output paths are checked before CUDA is needed, and
// binary input is described, never echoed.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { root } = require('../helpers');

const cli = path.join(root, 'dist', 'cli.js');
const run = (...args) => spawnSync(process.execPath, [cli, ...args], { encoding: 'utf8', timeout: 60000 });
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-cli-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe('exit codes', () => {
  test.each([
    [['--help'], 0],
    [['--version'], 0],
    [[], 2],
    [['no-such-command'], 2],
    [['bench', '--sizes', 'many'], 2],
    [['bench', '--html', '/nonexistent/dir/report.html'], 2],
    [['bench', '--junit', '/nonexistent/dir/r.xml'], 2],
    [['doctor', '--prometheus', '/nonexistent/dir/d.prom'], 2],
    [['memory-html', 'trace.json', '--out', '/nonexistent/dir/x.html'], 2],
  ])('cuda-memory %j exits %i', (args, code) => {
    const r = run(...args);
    expect(r.status).toBe(code);
    if (code === 2 && args.length) expect(r.stderr).toMatch(/^cuda-memory: /);
  });

  test('an output folder that does not exist is named before anything runs', () => {
    const r = run('memory-html', 'trace.json', '--out', '/nonexistent/dir/x.html');
    expect(r.stderr).toContain('The folder /nonexistent/dir does not exist');
    expect(r.stderr).not.toMatch(/ENOENT|at .*\.js/);
  });

  test('replay of a binary file says what it is and echoes none of it', () => {
    const file = path.join(tmp, 'snapshot.pickle');
    fs.writeFileSync(file, Buffer.from([0x80, 0x04, 0x95, 0x00, 0x1b, 0x5b, 0x32, 0x4a, 0x07, 0x41, 0x42]));
    const r = run('replay', file);
    expect(r.status).toBe(2);
    expect(r.stderr).toContain('is a binary file (11 bytes, starting 0x80 0x04 0x95 0x00)');
    expect(r.stderr + r.stdout).not.toContain('\x1b[2J');
    expect(r.stderr + r.stdout).not.toContain('\x07');
  });

  test('replay of JSON cut short names the position, not the text around it', () => {
    const file = path.join(tmp, 'cut.json');
    fs.writeFileSync(file, '{"schema": "cuda-memory/trace@1", "events": [{"action": "al');
    const r = run('replay', file);
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/is not valid JSON \((at byte \d+|it ends early or holds a stray character)\)/);
    expect(r.stderr).not.toContain('"al');
  });
});
