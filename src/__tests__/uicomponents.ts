// JupyterLab's ui-components as the jest tests see them (not a spec): the
// package is ES modules only, which jest does not load here. What the views
// use of it outside the browser: an icon's element. The browser tests draw
// the real ones.

export const caretDownEmptyIcon = {
  element: (): HTMLElement => document.createElement('span')
};
