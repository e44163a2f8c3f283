// Which endpoint a new connection (or UDP flow) goes to: round-robin over
// the frontend's endpoints, or, with ClientIP affinity, the endpoint this
// client last used while its entry is younger than the timeout (upstream's
// affinity: the timeout runs from the client's last new connection, as the
// `recent --update` / nft set timeout refresh does). Pure but for its own
// memory: the clock is passed in.

import { BlockList } from "node:net";
import type { Frontend } from "./frontends.ts";

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

/**
 * A frontend's choice for one client: turned away by loadBalancerSourceRanges,
 * or an endpoint from the frontend's set, or, for eTP=Local's short-circuit,
 * from the internal set when the client is a pod or this node.
 */
export class FrontendChoice {
  private main: Picker;
  private short: Picker | undefined;
  private shortFrom: BlockList | undefined;
  private allowed: BlockList | undefined;
  private all = new Set<string>();

  constructor(f: Frontend) {
    this.main = new Picker(f.endpoints, ms(f.affinitySeconds));
    this.update(f);
  }

  update(f: Frontend): void {
    this.main.update(f.endpoints, ms(f.affinitySeconds));
    if (f.shortCircuit) {
      if (this.short) this.short.update(f.shortCircuit.endpoints, ms(f.affinitySeconds));
      else this.short = new Picker(f.shortCircuit.endpoints, ms(f.affinitySeconds));
      this.shortFrom = cidrList(f.shortCircuit.from);
    } else {
      this.short = this.shortFrom = undefined;
    }
    this.allowed = f.sourceRanges === undefined ? undefined : cidrList(f.sourceRanges);
    this.all = new Set([...f.endpoints, ...(f.shortCircuit?.endpoints ?? [])]);
  }

  /** whether `endpoint` is still one of the frontend's (either set) */
  has(endpoint: string): boolean {
    return this.all.has(endpoint);
  }

  /** false: loadBalancerSourceRanges keep `client` out */
  admits(client: string): boolean {
    return !this.allowed || this.allowed.check(client, client.includes(":") ? "ipv6" : "ipv4");
  }

  /** `local`: the client is this node (its address is one of the node's) */
  pick(client: string, local: boolean, now: number, skip?: ReadonlySet<string>): string | undefined {
    const short = this.short && (local || this.shortFrom!.check(client, client.includes(":") ? "ipv6" : "ipv4"));
    return (short ? this.short! : this.main).pick(client, now, skip);
  }
}

/** a BlockList of CIDRs (a bare address is a /32 or /128) */
export function cidrList(cidrs: readonly string[]): BlockList {
  const list = new BlockList();
  for (const r of cidrs) {
    const [net, bits] = r.split("/");
    const v6 = net!.includes(":");
    list.addSubnet(net!, Number(bits ?? (v6 ? 128 : 32)), v6 ? "ipv6" : "ipv4");
  }
  return list;
}

const ms = (seconds: number | undefined) => (seconds === undefined ? undefined : seconds * 1000);
