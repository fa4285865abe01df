/**
 * DOM helpers shared by the views. Everything they write is text
 * (`textContent`, attributes): log lines, task keys and run names are
 * untrusted, and nothing here parses HTML.
 */

import { caretDownEmptyIcon } from '@jupyterlab/ui-components';

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * An element with a class and, when given, text.
 */
export function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/**
 * A button that calls `onClick`; `title` is its tooltip. JupyterLab's own
 * button (`jp-Button`, small), so that the panel's buttons look like the
 * rest of the application's in every theme.
 */
export function button(
  className: string,
  text: string,
  onClick: () => void,
  title?: string
): HTMLButtonElement {
  const node = element(
    'button',
    `jp-Button jp-mod-small jp-mod-minimal jp-DaskObserve-button ${className}`,
    text
  );
  if (title !== undefined) {
    node.title = title;
  }
  node.addEventListener('click', onClick);
  return node;
}

/**
 * ``select`` as JupyterLab's own ``HTMLSelect`` draws one (its classes and
 * caret), without React: the element to put in the page, the select in it.
 */
export function styledSelect(select: HTMLSelectElement): HTMLDivElement {
  const wrapper = element('div', 'jp-HTMLSelect jp-DefaultStyle');
  wrapper.append(
    select,
    caretDownEmptyIcon.element({
      tag: 'span',
      stylesheet: 'select',
      right: '4px',
      top: '4px'
    })
  );
  return wrapper;
}

/**
 * An SVG element with these attributes.
 */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attributes: Record<string, string> = {}
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, value);
  }
  return node;
}

/**
 * A view's heading: its name (which the side panel's section title already
 * shows, so there it is hidden), then whatever the view adds after it.
 */
export function heading(label: string): HTMLHeadingElement {
  const head = element('h3', '');
  head.append(element('span', 'jp-DaskObserve-label', label));
  return head;
}

/**
 * Show `fresh` in `list`, in their order, keyed by their `key` attribute
 * (`data-run-id`...): a card whose key was listed before keeps its node,
 * made to look like its fresh one by {@link patch} (its own class too: a
 * run's status is one); cards no longer listed go. Lists redrawn every few
 * seconds so keep what the user is clicking, ticking or selecting in: a
 * button swapped for a new one between the press and the release loses the
 * click.
 */
export function patchList(
  list: HTMLElement,
  fresh: readonly HTMLElement[],
  key: string
): void {
  const listed = new Map<string, Element>();
  for (const node of Array.from(list.children)) {
    listed.set(node.getAttribute(key) ?? '', node);
  }
  const wanted = fresh.map(node => {
    const before = listed.get(node.getAttribute(key) ?? '');
    // The same run (its status, hence its class, may have changed).
    if (before !== undefined && before.tagName === node.tagName) {
      patch(before, node);
      return before;
    }
    return node;
  });
  const kept = new Set<Element>(wanted);
  for (const node of listed.values()) {
    if (!kept.has(node)) {
      node.remove();
    }
  }
  // Moved only where the order changed (a new run goes on top, the rest stay).
  wanted.forEach((node, i) => {
    const there = list.children.item(i);
    if (there !== node) {
      list.insertBefore(node, there);
    }
  });
}

/**
 * Make `node` look like `fresh`, touching only what differs: its attributes,
 * its text, and each child in turn (an unchanged child is left as it is).
 *
 * A child is kept, with its listeners, where the fresh one is the same
 * control: the same tag and class. So views give every control whose action
 * differs a class of its own (`jp-DaskObserve-run-report`...). Properties
 * that are no attribute (a box's `checked`) stay as the user left them.
 */
export function patch(node: Element, fresh: Element): void {
  for (const { name } of Array.from(node.attributes)) {
    if (!fresh.hasAttribute(name)) {
      node.removeAttribute(name);
    }
  }
  for (const { name, value } of Array.from(fresh.attributes)) {
    if (node.getAttribute(name) !== value) {
      node.setAttribute(name, value);
    }
  }
  const before = Array.from(node.childNodes);
  let at = 0; // the first of `before` not matched yet
  // Each fresh child matched with the next old one that is the same control
  // (a button that moves along when a span is added before it is kept).
  for (const child of Array.from(fresh.childNodes)) {
    const match = before.findIndex((old, k) => k >= at && sameNode(old, child));
    if (match === -1) {
      node.insertBefore(child, before[at] ?? null);
      continue;
    }
    for (const skipped of before.slice(at, match)) {
      skipped.remove();
    }
    const old = before[match];
    if (old instanceof Element) {
      patch(old, child as Element);
    } else if (old.textContent !== child.textContent) {
      old.textContent = child.textContent;
    }
    at = match + 1;
  }
  for (const extra of before.slice(at)) {
    extra.remove();
  }
}

function sameNode(a: Node, b: Node): boolean {
  if (a instanceof Element && b instanceof Element) {
    return (
      a.tagName === b.tagName &&
      a.getAttribute('class') === b.getAttribute('class')
    );
  }
  return a.nodeType === b.nodeType; // text with text (an element has its own type)
}
