module.exports = {
  testEnvironment: 'node',
  testMatch: ['<rootDir>/test/**/*.test.js'],
  testTimeout: 120000,
  // GPU tests share one device; running files one at a time keeps memory figures meaningful.
  maxWorkers: 1,
  // jest's summary, then which groups were skipped and why (test/reporters/skipped.js); a test
  // file that leaves something in the temporary folder fails the run (test/reporters/tmpdir.js).
  reporters: ['default', '<rootDir>/test/reporters/skipped.js', '<rootDir>/test/reporters/tmpdir.js'],
};
