import { IDisposable } from '@lumino/disposable';
import { AccordionPanel, Widget } from '@lumino/widgets';

/**
 * Pixels the filler section keeps at least while the others take what they
 * hold (a few log lines under the filters).
 */
const FILLER_MIN = 170;

/**
 * Pixels a section keeps at least when not everything fits: its first lines.
 */
const SECTION_MIN = 48;

/**
 * Sizes an accordion's sections to what they hold: each open section as tall
 * as its content, as long as the panel has the room, and one section (the
 * logs, a list that scrolls by itself) takes what is left. Where everything
 * does not fit, each section gets a share in proportion to its content and
 * scrolls. (Equal shares of the panel cut a cluster's dashboard buttons, the
 * second worker and the history chart in half while the logs had room to
 * spare.) Once the user drags a divider, their sizes stay.
 */
export class SectionSizer implements IDisposable {
  constructor(accordion: AccordionPanel, filler: Widget) {
    this._accordion = accordion;
    this._filler = filler;
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
    this._resizes.observe(accordion.node);
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
   * Size the sections at the next frame (once, however often asked).
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
    const widgets = accordion.widgets;
    const titles = accordion.titles.reduce((sum, t) => sum + t.offsetHeight, 0);
    const available = accordion.node.clientHeight - titles - widgets.length;
    if (available <= 0 || this._userSized) {
      return;
    }
    const wanted = widgets.map(w =>
      w.isHidden || w === this._filler ? 0 : Private.contentHeight(w.node)
    );
    const fillerOpen = !this._filler.isHidden;
    const total = wanted.reduce((a, b) => a + b, 0);
    let sizes: number[];
    if (total + (fillerOpen ? FILLER_MIN : 0) <= available) {
      sizes = widgets.map((w, i) =>
        w === this._filler ? available - total : wanted[i]
      );
    } else {
      // Not all fits: shares of what is left after the filler's minimum.
      const room = available - (fillerOpen ? FILLER_MIN : 0);
      sizes = widgets.map((w, i) =>
        w === this._filler
          ? FILLER_MIN
          : w.isHidden
            ? 0
            : Math.max(SECTION_MIN, (wanted[i] * room) / total)
      );
    }
    const key = sizes.map(Math.round).join(',');
    if (key !== this._applied) {
      this._applied = key;
      accordion.setRelativeSizes(sizes);
    }
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
  private _mutations: MutationObserver;
  private _resizes: ResizeObserver;
  private _userSized = false;
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
    return Math.ceil(
      Math.max(bottom + parseFloat(style.paddingBottom), padding, minimum)
    );
  }
}
