// JupyterLab's ui-components as the jest tests see them (not a spec): the
// package is ES modules only, which jest does not load here. What the views
// use of it outside the browser: an icon's element. The browser tests draw
// the real ones.

import { Widget } from '@lumino/widgets';

export const caretDownEmptyIcon = {
  element: (): HTMLElement => document.createElement('span')
};

export const launchIcon = caretDownEmptyIcon;

/**
 * A toolbar of named items (JupyterLab's `Toolbar`: what a view puts there).
 */
export class Toolbar<T extends Widget = Widget> extends Widget {
  addItem(name: string, item: T): boolean {
    this._items.set(name, item);
    return true;
  }

  names(): IterableIterator<string> {
    return this._items.keys();
  }

  item(name: string): T | undefined {
    return this._items.get(name);
  }

  private _items = new Map<string, T>();
}

/**
 * A toolbar button, holding what it was made with (`props`), as JupyterLab's
 * `ToolbarButton` does.
 */
export class ToolbarButton extends Widget {
  constructor(readonly props: Record<string, unknown> = {}) {
    super();
  }
}
