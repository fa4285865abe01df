import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: ['lib/', 'labextension/', 'node_modules/', 'ui-tests/', '**/*.js']
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    rules: {
      // Option namespaces are JupyterLab's convention (`namespace X { IOptions }`).
      '@typescript-eslint/no-namespace': 'off',
      eqeqeq: 'error',
      // Types are imported as types: what a module needs at run time shows.
      // (jest.mock's factories, hoisted above imports, type with import().)
      '@typescript-eslint/consistent-type-imports': [
        'error',
        { disallowTypeAnnotations: false }
      ],
      // Log lines, task keys and run names are untrusted: text only, never HTML.
      'no-restricted-properties': [
        'error',
        {
          property: 'innerHTML',
          message: 'Render untrusted text with textContent.'
        },
        {
          property: 'outerHTML',
          message: 'Render untrusted text with textContent.'
        },
        { property: 'insertAdjacentHTML', message: 'Build DOM nodes instead.' }
      ]
    }
  }
);
