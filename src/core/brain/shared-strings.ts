// One copy of each string that repeats across the objects the brain keeps:
// node names and zones recur in every endpoint (100,000 at 10k services) and
// each decode makes a string of its own (a 16-byte cell at least, its
// characters too unless the JSON parser shared them). Bounded: cleared if it
// ever holds more than a cluster's worth.

const pool = new Map<string, string>();
const MAX = 100_000;

/** the pool's copy of `s` (equal to it); `s` itself the first time */
export function sharedString(s: string): string {
  const had = pool.get(s);
  if (had !== undefined) return had;
  if (pool.size >= MAX) pool.clear();
  pool.set(s, s);
  return s;
}
