// A fixed number of turns, handed out in the order asked for.

export class Slots {
  private used = 0;
  private readonly queue: Array<() => void> = [];

  constructor(private readonly size: number) {}

  /** Resolves when a turn is free; call the returned function to give it back. */
  async take(): Promise<() => void> {
    if (this.used < this.size) this.used++;
    else await new Promise<void>((resolve) => this.queue.push(resolve));
    let given = false;
    return () => {
      if (given) return;
      given = true;
      // The turn goes to the next in line as it is, or back to the pool.
      const next = this.queue.shift();
      if (next) next();
      else this.used--;
    };
  }
}
