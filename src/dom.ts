/**
 * A view's heading: its name (which the side panel's section title already
 * shows, so there it is hidden), then whatever the view adds after it.
 */
export function heading(label: string): HTMLHeadingElement {
  const element = document.createElement('h3');
  const name = document.createElement('span');
  name.className = 'jp-DaskObserve-label';
  name.textContent = label;
  element.append(name);
  return element;
}
