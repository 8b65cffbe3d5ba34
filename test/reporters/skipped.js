'use strict';
// After jest's own summary: each group of skipped tests, by file and the name that says why they
// are skipped (the outermost block's, "[GPU] copies — skipped: no GPU (NO_DRIVER: ...)", or that
// of an inner block or of the test itself where the skip is decided there), with its count. The
// default reporter only counts them. A skip whose names give no reason is listed as such, and
// tests left out by -t (--testNamePattern) as that.
class SkippedGroups {
  constructor(globalConfig = {}) {
    this.filtered = !!globalConfig.testNamePattern;
  }

  onRunComplete(_contexts, results) {
    const groups = new Map();
    for (const file of results.testResults) {
      for (const t of file.testResults) {
        if (t.status !== 'pending' && t.status !== 'skipped') continue;
        const rel = require('path').relative(process.cwd(), file.testFilePath);
        const titles = [...t.ancestorTitles, t.title];
        const why = titles.find((x) => / — skipped: /.test(x));
        const key = `${rel}: ${why ?? `${titles[0]} (${this.filtered ? 'not matched by -t' : 'no reason given'})`}`;
        groups.set(key, (groups.get(key) ?? 0) + 1);
      }
    }
    if (groups.size === 0) return;
    const lines = [...groups].map(([k, n]) => `  ${n} skipped  ${k}`);
    process.stderr.write(`\nSkipped groups (${groups.size}):\n${lines.join('\n')}\n`);
  }
}
module.exports = SkippedGroups;
