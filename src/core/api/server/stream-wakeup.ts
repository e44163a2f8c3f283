// A stream waiting for its next change: one pending wake-up at a time,
// cancelled by the stream's abort signal. The abort listener is added once
// per stream, not per wait: a brain serving 5,000 streams otherwise spent
// more on adding and removing AbortSignal listeners, at every change, than
// on anything of the change itself.

export class Wake {
  private fn: ((err?: unknown) => void) | null = null;

  constructor(private readonly signal: AbortSignal) {
    signal.addEventListener("abort", () => this.settle(signal.reason ?? new Error("aborted")), { once: true });
  }

  /** Ends the current wait, if any. */
  wake(): void {
    this.settle(undefined);
  }

  /** Resolves at the next wake(); rejects with the signal's reason when it aborts. */
  wait(): Promise<void> {
    if (this.signal.aborted) return Promise.reject(this.signal.reason);
    return new Promise<void>((resolve, reject) => {
      this.fn = (err) => (err === undefined ? resolve() : reject(err));
    });
  }

  private settle(err: unknown): void {
    const fn = this.fn;
    this.fn = null;
    fn?.(err);
  }
}
