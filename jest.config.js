module.exports = {
  testEnvironment: 'node',
  testMatch: ['<rootDir>/test/**/*.test.js'],
  testTimeout: 120000,
  // GPU tests share one device; running files one at a time keeps memory figures meaningful.
  maxWorkers: 1,
};
