'use strict';
// After jest's own summary: each group of skipped tests, by file and the name of its outermost
// block (which says why it is skipped: "[GPU] copies — skipped: no GPU (NO_DRIVER: ...)"), with
// its count. The default reporter only counts them.
class SkippedGroups {
  onRunComplete(_contexts, results) {
    const groups = new Map();
    for (const file of results.testResults) {
      for (const t of file.testResults) {
        if (t.status !== 'pending' && t.status !== 'skipped') continue;
        const rel = require('path').relative(process.cwd(), file.testFilePath);
        const key = `${rel}: ${t.ancestorTitles[0] ?? t.title}`;
        groups.set(key, (groups.get(key) ?? 0) + 1);
      }
    }
    if (groups.size === 0) return;
    const lines = [...groups].map(([k, n]) => `  ${n} skipped  ${k}`);
    process.stderr.write(`\nSkipped groups (${groups.size}):\n${lines.join('\n')}\n`);
  }
}
module.exports = SkippedGroups;
