import type { IDisposable } from '@lumino/disposable';
import { MessageLoop } from '@lumino/messaging';
import type { ISignal } from '@lumino/signaling';
import { Signal } from '@lumino/signaling';
import type { AccordionPanel } from '@lumino/widgets';
import { Widget } from '@lumino/widgets';

/**
 * Pixels the filler's list (the log lines) keeps while the other sections
 * take what they hold: about ten lines; down to LIST_TIGHT (three lines, the
 * list's least height in the stylesheet; "Open in a tab" for more) before the
 * panel would scroll and push the runs below the fold. Its own controls come
 * on top: the logs' filters, which wrap to three rows in a narrow sidebar. (A
 * fixed share of 140 px for the whole section, once, left its list no room
 * at all there: the filters took it, and the lines scrolled out of sight
 * inside the section.)
 */
const LIST_MIN = 180;
const LIST_TIGHT = 56;

/**
 * Sizes an accordion's sections to what they hold: each open section as tall
 * as its content, and one section (the logs: its controls and a list that
 * scrolls by itself) takes what is left (its controls and LIST_MIN, or down
 * to LIST_TIGHT). Where that is more than the panel's height, the panel
 * scrolls as one column. (Equal shares of the panel cut a cluster's dashboard
 * buttons, the second worker, a flag and the history chart, each in a box of
 * its own to scroll, while the logs had room to spare.) Once the user drags a
 * divider, their sizes stay.
 */
export class SectionSizer implements IDisposable {
  /**
   * `list` is the filler's node that scrolls (it takes the filler's share
   * beyond its other content).
   */
  constructor(accordion: AccordionPanel, filler: Widget, list: HTMLElement) {
    this._accordion = accordion;
    this._filler = filler;
    this._list = list;
    this._mutations = new MutationObserver(records => {
      // The filler's own lines change many times a second: not a reason.
      if (records.some(r => !filler.node.contains(r.target))) {
        this.schedule();
      }
    });
    this._mutations.observe(accordion.node, {
      childList: true,
      subtree: true,
      characterData: true
    });
    this._resizes = new ResizeObserver(() => this.schedule());
    // The panel's box, which the sidebar sizes, and what stands beside the
    // accordion in it (the replay bar comes and goes): not the accordion's,
    // which each fit that grows it would answer with another fit.
    const container = accordion.node.parentElement;
    const boxes =
      container === null
        ? [accordion.node]
        : [container, ...Array.from(container.children)];
    for (const box of boxes.filter(b => b !== accordion.node)) {
      this._resizes.observe(box);
    }
    accordion.node.addEventListener('pointerdown', this._onPointerDown, true);
    accordion.expansionToggled.connect(this.schedule, this);
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._mutations.disconnect();
    this._resizes.disconnect();
    this._accordion.node.removeEventListener(
      'pointerdown',
      this._onPointerDown,
      true
    );
    cancelAnimationFrame(this._frame);
  }

  /**
   * Size the sections at the next frame (once, however often asked). (Not
   * later: one fit at most every 100 ms halved the fits as the panel
   * opened, but moved a section up to 100 ms after what moved it showed,
   * a shift under a pointer aiming at what had just appeared.)
   */
  schedule(): void {
    if (this._disposed || this._userSized || this._frame) {
      return;
    }
    this._frame = requestAnimationFrame(() => {
      this._frame = 0;
      this.fit();
    });
  }

  /**
   * Size the sections now.
   */
  fit(): void {
    const accordion = this._accordion;
    const node = accordion.node;
    const container = node.parentElement;
    if (this._userSized || container === null) {
      return;
    }
    const widgets = accordion.widgets;
    // Titles and the dividers between the open sections: the layout's
    // spacing each (4 px, not the 1 px once assumed here: the sections were
    // given 3 px a divider too many, and a seventh section cut the workers').
    const visible = widgets.filter(w => !w.isHidden).length;
    const chrome =
      accordion.titles.reduce((sum, t) => sum + t.offsetHeight, 0) +
      accordion.spacing * Math.max(0, visible - 1);
    const beside = Array.from(container.children)
      .filter(child => child !== node)
      .reduce((sum, child) => sum + (child as HTMLElement).offsetHeight, 0);
    const space = container.clientHeight - beside - chrome;
    if (space <= 0) {
      return; // not laid out yet
    }
    const wanted = widgets.map(w =>
      w.isHidden || w === this._filler ? 0 : Private.contentHeight(w.node)
    );
    const total = wanted.reduce((a, b) => a + b, 0);
    let filler = 0;
    if (!this._filler.isHidden) {
      const controls =
        Private.contentHeight(this._filler.node) - this._list.offsetHeight;
      const list = Math.min(LIST_MIN, space - total - controls);
      filler = controls + Math.max(LIST_TIGHT, list);
    }
    // Where all does not fit, the panel grows and scrolls as one column:
    // every section whole, the logs' list at its least.
    const available = Math.max(space, total + filler);
    const height = available > space ? `${available + chrome}px` : '';
    const sizes = widgets.map((w, i) =>
      w === this._filler ? available - total : wanted[i]
    );
    const key = `${height};${sizes.map(Math.round).join(',')}`;
    if (key === this._applied) {
      return;
    }
    this._applied = key;
    node.style.minHeight = height;
    accordion.setRelativeSizes(sizes);
    MessageLoop.sendMessage(accordion, Widget.ResizeMessage.UnknownSize);
  }

  private _onPointerDown = (event: PointerEvent): void => {
    const target = event.target as HTMLElement | null;
    // A divider between two sections: the user sizes them from now on.
    if (target?.classList.contains('lm-AccordionPanel-handle')) {
      this._userSized = true;
    }
  };

  private _accordion: AccordionPanel;
  private _applied = '';
  private _disposed = false;
  private _filler: Widget;
  private _frame = 0;
  private _list: HTMLElement;
  private _mutations: MutationObserver;
  private _resizes: ResizeObserver;
  private _userSized = false;
}

/**
 * Which sections of an accordion are folded, by title: what the user left
 * (saved and restored between sessions), and sections folded until they have
 * something to show.
 */
export class SectionFolds {
  constructor(accordion: AccordionPanel) {
    this._accordion = accordion;
    accordion.expansionToggled.connect(() =>
      this._changed.emit(this.collapsed)
    );
  }

  /**
   * The titles of the sections folded now.
   */
  get collapsed(): string[] {
    return this._accordion.widgets
      .filter(w => w.isHidden)
      .map(w => w.title.label);
  }

  /**
   * Fold the sections of these titles, open the others.
   */
  set collapsed(titles: string[]) {
    for (const widget of this._accordion.widgets) {
      this.fold(widget, titles.includes(widget.title.label));
    }
  }

  /**
   * Told the folded sections' titles when the user folds or opens one.
   */
  get changed(): ISignal<this, string[]> {
    return this._changed;
  }

  /**
   * Fold (or open) one section.
   */
  fold(widget: Widget, folded: boolean): void {
    const index = this._accordion.widgets.indexOf(widget);
    if (folded && !widget.isHidden) {
      this._accordion.collapse(index);
    } else if (!folded && widget.isHidden) {
      this._accordion.expand(index);
    }
  }

  private _accordion: AccordionPanel;
  private _changed = new Signal<this, string[]>(this);
}

namespace Private {
  /**
   * The height a section's content takes with its padding, whether it
   * overflows the section or not.
   */
  export function contentHeight(node: HTMLElement): number {
    const style = getComputedStyle(node);
    const padding =
      parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
    let bottom = 0;
    for (const child of Array.from(node.children) as HTMLElement[]) {
      if (child.offsetParent === null) {
        continue; // not displayed
      }
      const margin = parseFloat(getComputedStyle(child).marginBottom) || 0;
      bottom = Math.max(bottom, child.offsetTop + child.offsetHeight + margin);
    }
    const minimum = parseFloat(style.minHeight) || 0;
    // (+2: borders and sub-pixel heights the offsets round away.)
    bottom += 2;
    return Math.ceil(
      Math.max(bottom + parseFloat(style.paddingBottom), padding, minimum)
    );
  }
}
