// jsdom has no MessageChannel, which the log buffer slices its filtering
// with (a task per slice, as in the browser): Node's own.
const { MessageChannel } = require('worker_threads');
globalThis.MessageChannel = MessageChannel;
