'use strict';
// test/reporters/skipped.js: each group of skipped tests is listed with the name that says why,
// wherever the skip is decided (the outermost block, an inner one, or the test itself).
const SkippedGroups = require('./skipped');

function listed(results, globalConfig) {
  const writes = [];
  const spy = jest.spyOn(process.stderr, 'write').mockImplementation((s) => writes.push(String(s)) && true);
  try {
    new SkippedGroups(globalConfig).onRunComplete(new Set(), { testResults: results });
  } finally {
    spy.mockRestore();
  }
  return writes.join('').trim().split('\n').slice(1);
}

const file = (name, tests) => ({ testFilePath: `${process.cwd()}/test/${name}`, testResults: tests });
const skipped = (ancestorTitles, title) => ({ status: 'pending', ancestorTitles, title });

test('the reason is taken from the block or the test that gives it', () => {
  const lines = listed([
    file('a.test.js', [
      skipped(['[GPU] copies — skipped: no GPU (NO_DRIVER: x)'], 'one'),
      skipped(['[GPU] copies — skipped: no GPU (NO_DRIVER: x)'], 'two'),
    ]),
    file('b.test.js', [skipped(['pinnedCallFloor', '[GPU] on a GPU — skipped: no GPU (NO_DRIVER: x)'], 'copies')]),
    file('c.test.js', [skipped(['readFile into host memory'], 'no permission — skipped: running as root, who may read anything')]),
    file('d.test.js', [skipped(['a block'], 'a test')]),
  ]);
  expect(lines).toEqual([
    '  2 skipped  test/a.test.js: [GPU] copies — skipped: no GPU (NO_DRIVER: x)',
    '  1 skipped  test/b.test.js: [GPU] on a GPU — skipped: no GPU (NO_DRIVER: x)',
    '  1 skipped  test/c.test.js: no permission — skipped: running as root, who may read anything',
    '  1 skipped  test/d.test.js: a block (no reason given)',
  ]);
});

test('tests left out by -t are said to be', () => {
  expect(listed([file('d.test.js', [skipped(['a block'], 'a test')])], { testNamePattern: 'x' })).toEqual([
    '  1 skipped  test/d.test.js: a block (not matched by -t)',
  ]);
});
