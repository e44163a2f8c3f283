// Which endpoint a new connection (or UDP flow) goes to: round-robin over
// the frontend's endpoints, or, with ClientIP affinity, the endpoint this
// client last used while its entry is younger than the timeout (upstream's
// affinity: the timeout runs from the client's last new connection, as the
// `recent --update` / nft set timeout refresh does). Pure but for its own
// memory: the clock is passed in.

export class Picker {
  private next = 0;
  private endpoints: readonly string[] = [];
  /** client IP -> endpoint and when its affinity ends (ms) */
  private readonly affinity = new Map<string, { endpoint: string; until: number }>();

  constructor(
    endpoints: readonly string[],
    private affinityMs?: number,
  ) {
    this.update(endpoints, affinityMs);
  }

  /**
   * New endpoint set: affinity entries to endpoints that left are forgotten
   * (their clients pick again), the others kept.
   */
  update(endpoints: readonly string[], affinityMs?: number): void {
    this.endpoints = endpoints;
    if (affinityMs !== this.affinityMs) this.affinity.clear();
    this.affinityMs = affinityMs;
    const kept = new Set(endpoints);
    for (const [client, e] of this.affinity) if (!kept.has(e.endpoint)) this.affinity.delete(client);
    if (this.next >= endpoints.length) this.next = 0;
  }

  get size(): number {
    return this.endpoints.length;
  }

  /** The endpoint for a new connection from `client`; undefined when there is none. `skip`: endpoints that just failed. */
  pick(client: string, now: number, skip?: ReadonlySet<string>): string | undefined {
    if (this.affinityMs !== undefined) {
      const held = this.affinity.get(client);
      if (held && held.until > now && !skip?.has(held.endpoint)) {
        held.until = now + this.affinityMs;
        return held.endpoint;
      }
    }
    for (let tries = 0; tries < this.endpoints.length; tries++) {
      const e = this.endpoints[this.next];
      this.next = (this.next + 1) % this.endpoints.length;
      if (skip?.has(e)) continue;
      if (this.affinityMs !== undefined) this.remember(client, e, now);
      return e;
    }
    return undefined;
  }

  private remember(client: string, endpoint: string, now: number) {
    // expired entries go as new ones come, so the map holds live clients only
    if (this.affinity.size > 1024) for (const [c, e] of this.affinity) if (e.until <= now) this.affinity.delete(c);
    this.affinity.set(client, { endpoint, until: now + this.affinityMs! });
  }
}
