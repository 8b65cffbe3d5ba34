'use strict';
// Expectation files (lib/bench/expectations.ts): the shipped ones are valid and each is chosen
// for the device it names; a user's file replaces them; a bad file is refused, naming the field.
const fs = require('fs');
const os = require('os');
const path = require('path');
const { root, thrown: code } = require('../helpers');
const ex = require(path.join(root, 'dist', 'bench', 'expectations'));

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-expectations-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));
const write = (name, value) => {
  const f = path.join(tmp, name);
  fs.writeFileSync(f, typeof value === 'string' ? value : JSON.stringify(value));
  return f;
};

test('the package ships valid files, each with its sources in notes', () => {
  const list = ex.shippedExpectations();
  expect(list.map((e) => path.basename(e.file))).toEqual(['h100-pcie-gen5-x16.json', 'h100-sxm.json', 'h200.json']);
  for (const e of list) {
    expect(e.notes.length).toBeGreaterThan(0);
    expect(e.expect.h2dPinnedGbps).toBeGreaterThan(0);
  }
  const pkg = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8'));
  expect(pkg.files).toContain('expectations/');
});

test('each shipped file is chosen by what the device reports: name and PCIe link', () => {
  const pick = (name, pcie) => ex.expectationsFor({ name, pcie })?.file;
  const gen5 = { maxGeneration: 5, maxWidth: 16 };
  expect(path.basename(pick('NVIDIA H100 PCIe', gen5))).toBe('h100-pcie-gen5-x16.json');
  // The same card in a Gen4 slot, or one whose link NVML cannot read: no file claims it.
  expect(pick('NVIDIA H100 PCIe', { maxGeneration: 4, maxWidth: 16 })).toBeUndefined();
  expect(pick('NVIDIA H100 PCIe', null)).toBeUndefined();
  expect(path.basename(pick('NVIDIA H100 80GB HBM3', gen5))).toBe('h100-sxm.json');
  expect(path.basename(pick('NVIDIA H200', gen5))).toBe('h200.json');
  expect(pick('NVIDIA A100-SXM4-80GB', gen5)).toBeUndefined();
});

test("a user's file replaces the shipped ones, whatever the device", () => {
  const f = write('mine.json', {
    schema: 'cuda-memory/expectations@1',
    name: 'our lab',
    match: {},
    expect: { h2dPinnedGbps: 20, d2dGbps: 1000 },
  });
  const e = ex.expectationsFor({ name: 'NVIDIA H100 PCIe', pcie: { maxGeneration: 5, maxWidth: 16 } }, f);
  expect(e).toMatchObject({
    name: 'our lab',
    file: f,
    expect: { h2dPinnedGbps: 20, d2hPinnedGbps: null, d2dGbps: 1000, p2pGbps: null, maxCv: null },
  });
});

test('a bad file is refused with ERR_EXPECTATIONS_INVALID, naming the file and what is wrong', () => {
  const base = { schema: 'cuda-memory/expectations@1', name: 'x', match: {}, expect: {} };
  const cases = [
    ['nojson.json', 'not json', 'it is not JSON'],
    ['schema.json', { ...base, schema: 'v2' }, 'expected schema "cuda-memory/expectations@1", got "v2"'],
    ['negative.json', { ...base, expect: { h2dPinnedGbps: -1 } }, 'expected expect.h2dPinnedGbps to be a positive number or null, got -1'],
    ['typo.json', { ...base, expect: { h2dPinned: 48 } }, 'unknown field expect.h2dPinned'],
    // A misspelt field anywhere, not only in expect: the figures or the match it meant would be left out.
    ['top.json', { ...base, expected: { h2dPinnedGbps: 48 } }, 'unknown field expected (known: schema, name, match, expect, notes)'],
    ['match.json', { ...base, match: { nmae: 'H100' } }, 'unknown field match.nmae (known: name, pcieMaxGeneration, pcieMaxWidth)'],
    ['two.json', { ...base, match: { nmae: 'H100', 'with\u001bescape': 1 } }, 'unknown fields match.nmae, match."with\\u001bescape"'],
    ['file.json', { ...base, file: '/elsewhere.json' }, 'unknown field file'],
    ['notes.json', { ...base, notes: 'measured' }, 'expected notes to be an array, got "measured"'],
    ['regex.json', { ...base, match: { name: '(' } }, 'match.name is not a regular expression'],
    ['width.json', { ...base, match: { pcieMaxWidth: 0 } }, 'expected match.pcieMaxWidth to be a positive integer'],
  ];
  for (const [name, value, message] of cases) {
    const f = write(name, value);
    expect(() => ex.readExpectations(f)).toThrow(
      expect.objectContaining({ code: 'ERR_EXPECTATIONS_INVALID', message: expect.stringContaining(message) }),
    );
    expect(() => ex.readExpectations(f)).toThrow(f);
  }
  expect(() => ex.readExpectations(path.join(tmp, 'missing.json'))).toThrow(
    expect.objectContaining({ code: 'ERR_EXPECTATIONS_INVALID', message: expect.stringContaining('ENOENT') }),
  );
});

test('--expectations: a bad file stops doctor and bench before anything runs, naming it; with --devices bench refuses it', () => {
  const cli = path.join(root, 'dist', 'cli.js');
  const bad = write('bad-cli.json', { schema: 'cuda-memory/expectations@1', name: 'x', expect: { d2dGbps: 'fast' } });
  const misspelt = write('misspelt-cli.json', { schema: 'cuda-memory/expectations@1', name: 'x', expected: { d2dGbps: 1e6 } });
  for (const command of ['doctor', 'bench']) {
    const run = (file) =>
      require('child_process').spawnSync(process.execPath, [cli, command, '--expectations', file], {
        encoding: 'utf8',
        timeout: 60000,
      });
    let r = run(bad);
    expect([command, r.status]).toEqual([command, 2]);
    expect(r.stderr).toContain(
      `the expectation file ${bad} is not valid: expected expect.d2dGbps to be a positive number or null, got "fast"`,
    );
    r = run(misspelt);
    expect([command, r.status]).toEqual([command, 2]);
    expect(r.stderr).toContain(`the expectation file ${misspelt} is not valid: unknown field expected`);
  }
  const good = write('good-cli.json', { schema: 'cuda-memory/expectations@1', name: 'x', expect: {} });
  const r = require('child_process').spawnSync(process.execPath, [cli, 'bench', '--devices', 'all', '--expectations', good], {
    encoding: 'utf8',
    timeout: 60000,
  });
  expect(r.status).toBe(2);
  expect(r.stderr).toContain('--expectations is for the one-GPU benchmark');
});

test('arguments that are not expectations or a device are refused with a coded error naming them', () => {
  const [shipped] = ex.shippedExpectations();
  const h100 = { name: 'NVIDIA H100 PCIe', pcie: { maxGeneration: 5, maxWidth: 16 } };
  expect(code(() => ex.expectationsMatch(null, h100))).toMatch(/^ERR_INVALID_ARG_TYPE: .* for e but received null/);
  expect(code(() => ex.expectationsMatch({ ...shipped, match: { name: 5 } }, h100))).toMatch(/^ERR_EXPECTATIONS_INVALID: .*match\.name/);
  expect(code(() => ex.expectationsMatch(shipped, { name: Symbol('x') }))).toMatch(
    /^ERR_INVALID_ARG_TYPE: .* for d\.name but received a symbol/,
  );
  expect(code(() => ex.expectationsFor(h100, 5))).toMatch(/^ERR_INVALID_ARG_TYPE: .* for userFile but received number 5/);
  expect(code(() => ex.expectationsFor(h100, undefined, {}))).toMatch(/^ERR_INVALID_ARG_TYPE: .* for list /);
  expect(code(() => ex.expectationsFor(h100, undefined, [shipped, 7]))).toMatch(/for list\[1\] but received number 7/);
  expect(code(() => ex.expectationGates({ ...shipped, expect: { h2dPinnedGbps: 1n } }))).toMatch(
    /^ERR_EXPECTATIONS_INVALID: .*expect\.h2dPinnedGbps .*bigint 1n/,
  );
  expect(code(() => ex.checkExpectations({ ...shipped }, Symbol('f')))).toMatch(/^ERR_INVALID_ARG_TYPE: .* for file but received a symbol/);
  expect(code(() => ex.checkExpectations({ ...shipped, schema: 2n }, 'f.json'))).toMatch(/^ERR_EXPECTATIONS_INVALID: .*got bigint 2n/);
  expect(code(() => ex.checkExpectations({ ...shipped, notes: [Object.create(null)] }, 'f.json'))).toBe('returned');
});
