// TypeScript unit tests of the panel's data: the log buffer, the stream
// client (over a fake socket), the polled models and the settings' defaults.
// `npm test`; the suite runs them too (tests/test_typescript.py). The browser
// tests cover the views.
module.exports = {
  testEnvironment: 'jsdom',
  roots: ['<rootDir>/src'],
  testMatch: ['**/__tests__/**/*.spec.ts'],
  setupFiles: ['<rootDir>/jest.setup.js'],
  // ES modules only: its icons as a stand-in (src/__tests__/uicomponents.ts).
  moduleNameMapper: {
    '^@jupyterlab/ui-components$': '<rootDir>/src/__tests__/uicomponents.ts'
  },
  transform: {
    '^.+\\.ts$': [
      'ts-jest',
      {
        // Transpiled only, file by file (cold: 4 s against 8 s type-checked);
        // scripts/lint.sh type-checks them (tsconfig.test.json).
        tsconfig: {
          isolatedModules: true,
          module: 'commonjs',
          target: 'ES2020',
          esModuleInterop: true,
          resolveJsonModule: true,
          strict: true,
          types: ['jest']
        }
      }
    ]
  }
};
