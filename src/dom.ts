/**
 * DOM helpers shared by the views. Everything they write is text
 * (`textContent`, attributes): log lines, task keys and run names are
 * untrusted, and nothing here parses HTML.
 */

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
