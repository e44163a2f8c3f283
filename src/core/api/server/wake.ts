// A stream waiting for its next change: one pending wake-up at a time,
// cancelled by the stream's abort signal.

export class Wake {
  private fn: (() => void) | null = null;

  /** Ends the current wait, if any. */
  wake(): void {
    this.fn?.();
  }

  /** Resolves at the next wake(); rejects with the signal's reason when it aborts. */
  wait(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const done = () => {
        this.fn = null;
        signal.removeEventListener("abort", done);
        if (signal.aborted) reject(signal.reason);
        else resolve();
      };
      this.fn = done;
      signal.addEventListener("abort", done, { once: true });
    });
  }
}
