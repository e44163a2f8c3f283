// An immutable map whose updated copy costs what changed, not what it holds:
// entries live in a fixed number of shards, and a copy shares every shard it
// did not touch. The brain publishes one per revision, so one endpoint change
// at 10,000 services costs the same as at 10 (a plain Map copy would cost
// O(services) per revision).

const SHARDS = 256;

function shardOf(key: string): number {
  let h = 2166136261; // FNV-1a
  for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 16777619);
  return (h >>> 0) % SHARDS;
}

export class ShardedMap<V> implements ReadonlyMap<string, V> {
  private constructor(
    private readonly shards: ReadonlyArray<ReadonlyMap<string, V>>,
    readonly size: number,
  ) {}

  static empty<V>(): ShardedMap<V> {
    return new ShardedMap<V>(
      Array.from({ length: SHARDS }, () => new Map<string, V>()),
      0,
    );
  }

  /** A copy with `updates` applied (null value = delete); only touched shards are copied. */
  with(updates: ReadonlyMap<string, V | null>): ShardedMap<V> {
    if (this.size === 0) return ShardedMap.of(updates);
    const shards = this.shards.slice();
    const copied = new Set<number>();
    let size = this.size;
    for (const [key, value] of updates) {
      const i = shardOf(key);
      if (!copied.has(i)) {
        shards[i] = new Map(shards[i]);
        copied.add(i);
      }
      const shard = shards[i] as Map<string, V>;
      const had = shard.has(key);
      if (value === null) {
        if (had) size--;
        shard.delete(key);
      } else {
        if (!had) size++;
        shard.set(key, value);
      }
    }
    return new ShardedMap(shards, size);
  }

  /** A map of `entries` (null values left out): a first state, with no shard to copy or keep apart. */
  private static of<V>(entries: ReadonlyMap<string, V | null>): ShardedMap<V> {
    const shards = Array.from({ length: SHARDS }, () => new Map<string, V>());
    let size = 0;
    for (const [key, value] of entries) {
      if (value === null) continue;
      shards[shardOf(key)].set(key, value); // a Map's keys are distinct: each one new here
      size++;
    }
    return new ShardedMap(shards, size);
  }

  get(key: string): V | undefined {
    return this.shards[shardOf(key)].get(key);
  }

  has(key: string): boolean {
    return this.shards[shardOf(key)].has(key);
  }

  *entries(): MapIterator<[string, V]> {
    for (const s of this.shards) yield* s.entries();
  }

  *keys(): MapIterator<string> {
    for (const s of this.shards) yield* s.keys();
  }

  *values(): MapIterator<V> {
    for (const s of this.shards) yield* s.values();
  }

  [Symbol.iterator](): MapIterator<[string, V]> {
    return this.entries();
  }

  forEach(fn: (value: V, key: string, map: ReadonlyMap<string, V>) => void): void {
    for (const [k, v] of this.entries()) fn(v, k, this);
  }
}
