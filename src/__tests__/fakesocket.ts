// A WebSocket the jest tests drive (not a spec: no tests of its own).

/**
 * A WebSocket that the test drives: it records what the client sends and
 * delivers the frames the test makes the "server" send.
 */
export class FakeSocket {
  static made: FakeSocket[] = [];

  constructor(readonly url: string) {
    FakeSocket.made.push(this);
  }

  onopen: (() => void) | null = null;
  onmessage: ((event: { data: string }) => void) | null = null;
  onclose: (() => void) | null = null;
  sent: Record<string, unknown>[] = [];
  closed = false;

  send(text: string): void {
    this.sent.push(JSON.parse(text));
  }

  close(): void {
    this.closed = true;
  }

  /** The server side: open, then say each message. */
  open(): void {
    this.onopen?.();
  }

  /** What the server says to a subscription: the newest one, by default. */
  say(message: Record<string, unknown>, id = this.newest()): void {
    this.onmessage?.({ data: JSON.stringify({ ...message, id }) });
  }

  /** The id of the newest subscription the client sent. */
  newest(): string {
    const subscribes = this.sent.filter(m => m.type === 'subscribe');
    return String(subscribes[subscribes.length - 1]?.id);
  }

  /** The connection drops (the server restarted). */
  drop(): void {
    this.onclose?.();
  }
}
