// jsdom has no MessageChannel, which the log buffer slices its filtering
// with (a task per slice, as in the browser): Node's own.
const { MessageChannel } = require('worker_threads');
globalThis.MessageChannel = MessageChannel;

// Nor DragEvent, which @lumino/dragdrop subclasses at import (the views are
// lumino widgets); JupyterLab's own jest shim defines it so too.
if (typeof globalThis.DragEvent === 'undefined') {
  globalThis.DragEvent = class DragEvent extends MouseEvent {};
}
