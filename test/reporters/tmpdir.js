'use strict';
// Every test cleans up after itself. The run gets a temporary folder of its own, made the TMPDIR
// of this process and so of every test and child process (os.tmpdir(), mktemp and Python's
// tempfile follow it). After each test file, a new entry there is that file's leftover; the run
// then fails, naming the file and what it left, and the folder is removed either way.
const fs = require('fs');
const os = require('os');
const path = require('path');

class TmpdirCheck {
  constructor() {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cuda-memory-jest-'));
    process.env.TMPDIR = this.dir;
    this.seen = new Set();
    this.leaks = [];
    this.error = undefined;
  }

  // The entries that appeared since the last look, charged to `who`.
  look(who) {
    let entries = [];
    try {
      entries = fs.readdirSync(this.dir).filter((e) => !this.seen.has(e));
    } catch (e) {
      entries = [`(the folder itself: ${e.code || e.message})`];
    }
    for (const e of entries) this.seen.add(e);
    if (entries.length) this.leaks.push(`${who} left ${entries.sort().join(', ')}`);
  }

  onTestResult(test) {
    this.look(path.relative(process.cwd(), test.path));
  }

  onRunComplete() {
    // A child process that outlived its test file may write after that file's look.
    this.look('the run (after its last file)');
    fs.rmSync(this.dir, { recursive: true, force: true });
    if (this.leaks.length === 0) return;
    const text = `Tests left entries in the temporary folder (${this.dir}, now removed):\n${this.leaks.map((l) => `  ${l}`).join('\n')}`;
    process.stderr.write(`\n${text}\n`);
    this.error = new Error(text);
  }

  getLastError() {
    return this.error;
  }
}
module.exports = TmpdirCheck;
