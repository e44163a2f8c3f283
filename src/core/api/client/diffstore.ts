// The diffstore: a backend writes the desired state each round and reads
// back what was created, updated and deleted since the last round, like
// kpng's client/diffstore. A backend keeps, say, one store of rule texts by
// chain name; after each change set it rewrites what it knows and programs
// only the differences.
//
//   const chains = new DiffStore<string, string[]>({ create: () => [] });
//   for (...) chains.get(name).push(rule);   // get = touch + this round's value
//   const { created, updated, deleted } = chains.done();

export interface DiffStoreOptions<K, V> {
  /** the value `get` returns for a key not written yet this round (default: throws) */
  create?: (key: K) => V;
  /** whether a key's value changed between rounds (default: structural equality) */
  equals?: (a: V, b: V) => boolean;
}

export interface Diff<K, V> {
  created: Array<[K, V]>;
  /** [key, new value, previous value] */
  updated: Array<[K, V, V]>;
  /** [key, previous value] */
  deleted: Array<[K, V]>;
}

export class DiffStore<K, V> {
  private prev = new Map<K, V>();
  private round = new Map<K, V>();
  private readonly create?: (key: K) => V;
  private readonly same: (a: V, b: V) => boolean;

  constructor(opts: DiffStoreOptions<K, V> = {}) {
    this.create = opts.create;
    this.same = opts.equals ?? deepEqual;
  }

  /** This round's value of `key`, created on first use; the key stays alive this round. */
  get(key: K): V {
    let v = this.round.get(key);
    if (v === undefined && !this.round.has(key)) {
      if (!this.create) throw new Error("DiffStore.get: no create function; use set()");
      v = this.create(key);
      this.round.set(key, v);
    }
    return v as V;
  }

  /** Sets this round's value of `key`. */
  set(key: K, value: V): void {
    this.round.set(key, value);
  }

  /** Keeps `key` alive with last round's value; false when it had none. */
  touch(key: K): boolean {
    if (this.round.has(key)) return true;
    if (!this.prev.has(key)) return false;
    this.round.set(key, this.prev.get(key) as V);
    return true;
  }

  /** Ends the round: what changed since the last one. Keys not written this round are deleted. */
  done(): Diff<K, V> {
    const diff: Diff<K, V> = { created: [], updated: [], deleted: [] };
    for (const [k, v] of this.round) {
      if (!this.prev.has(k)) diff.created.push([k, v]);
      else {
        const old = this.prev.get(k) as V;
        if (old !== v && !this.same(old, v)) diff.updated.push([k, v, old]);
      }
    }
    for (const [k, v] of this.prev) if (!this.round.has(k)) diff.deleted.push([k, v]);
    this.prev = this.round;
    this.round = new Map();
    return diff;
  }

  /** Forgets everything: the next round reports every key as created (after a failed apply). */
  reset(): void {
    this.prev = new Map();
    this.round = new Map();
  }

  /** The values of the last finished round. */
  entries(): IterableIterator<[K, V]> {
    return this.prev.entries();
  }

  get size(): number {
    return this.prev.size;
  }
}

/** Structural equality for plain data: primitives, arrays, typed arrays, Maps, Sets and plain objects. */
export function deepEqual(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Object.getPrototypeOf(a) !== Object.getPrototypeOf(b)) return false;
  if (ArrayBuffer.isView(a)) {
    const x = new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
    const y = new Uint8Array((b as ArrayBufferView).buffer, (b as ArrayBufferView).byteOffset, (b as ArrayBufferView).byteLength);
    return x.length === y.length && x.every((n, i) => n === y[i]);
  }
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((v, i) => deepEqual(v, bb[i]));
  }
  if (a instanceof Map) {
    const bb = b as Map<unknown, unknown>;
    if (a.size !== bb.size) return false;
    for (const [k, v] of a) if (!bb.has(k) || !deepEqual(v, bb.get(k))) return false;
    return true;
  }
  if (a instanceof Set) {
    const bb = b as Set<unknown>;
    return a.size === bb.size && [...a].every((v) => bb.has(v));
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  return ka.every((k) => Object.hasOwn(b, k) && deepEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}
