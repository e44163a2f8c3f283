// The endpoints of one service in a node-local state, as a read-only map kept
// in two arrays. The brain holds one per service and node view, and two
// arrays take a fraction of a Map's memory (see docs/results/2026-11.md). A
// state is never mutated once published, so nothing needs Map's
// insertion and deletion.

import type { Endpoint } from "../../gen/localv1/services_pb.ts";

/** up to this many keys, a lookup scans; above, it goes through an index made on first use */
const SCAN = 16;

export class EndpointMap implements ReadonlyMap<string, Endpoint> {
  private index: Map<string, number> | undefined;

  /** `keys[i]` names `values[i]`; keys are distinct; both arrays become the map's own */
  constructor(
    private readonly ks: string[],
    private readonly vs: Endpoint[],
  ) {}

  get size(): number {
    return this.ks.length;
  }

  get(key: string): Endpoint | undefined {
    const i = this.find(key);
    return i < 0 ? undefined : this.vs[i];
  }

  has(key: string): boolean {
    return this.find(key) >= 0;
  }

  private find(key: string): number {
    if (this.ks.length <= SCAN) return this.ks.indexOf(key);
    if (!this.index) {
      this.index = new Map();
      for (let i = 0; i < this.ks.length; i++) this.index.set(this.ks[i], i);
    }
    return this.index.get(key) ?? -1;
  }

  keys(): MapIterator<string> {
    return this.ks.values();
  }

  values(): MapIterator<Endpoint> {
    return this.vs.values();
  }

  *entries(): MapIterator<[string, Endpoint]> {
    for (let i = 0; i < this.ks.length; i++) yield [this.ks[i], this.vs[i]];
  }

  [Symbol.iterator](): MapIterator<[string, Endpoint]> {
    return this.entries();
  }

  forEach(fn: (value: Endpoint, key: string, map: ReadonlyMap<string, Endpoint>) => void, thisArg?: unknown): void {
    for (let i = 0; i < this.ks.length; i++) fn.call(thisArg, this.vs[i], this.ks[i], this);
  }

  get [Symbol.toStringTag](): string {
    return "EndpointMap";
  }
}
