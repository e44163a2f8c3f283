// Stable positions in a dispatch list. An endpoint is picked by `numgen
// random mod N` over the keys [0, N) of its list (names.ts), so a position
// is an element of a kernel map. Giving positions in sorted order would
// renumber most of a big list when a Deployment rolls (new pod IPs sort
// anywhere): a wave replacing 100 of 5,000 endpoints would rewrite ~5,000
// elements. Instead an endpoint keeps its position while it stays:
//
//   - a new endpoint takes the lowest position freed by one that left,
//     else the next one past the end;
//   - when more left than came, the last ones move into the lowest holes
//     (swap-with-last), so the list stays dense: one element each;
//
// so the element writes of a change are O(endpoints changed), whatever the
// size of the list. The count N (in the dispatch rule or chain name) and the
// elements change in the same atomic transaction, so no packet ever draws a
// position without an endpoint. Without a previous order (first sync, or a
// full resync) the list is sorted, and arrivals are taken in sorted order: a
// sync is deterministic for a given history. Only arrivals are sorted (a
// wave's 100, not the list's 5,000).

/**
 * `next` in list order: the members of `prev` (ids in position order) keep
 * their positions, arrivals (sorted by `cmp`) fill holes then the end, and
 * holes left over are filled from the end.
 */
export function place<T>(prev: readonly string[] | undefined, next: readonly T[], id: (t: T) => string, cmp: (a: T, b: T) => number): T[] {
  if (!prev?.length) return [...next].sort(cmp);
  const arrivals = new Map<string, T>();
  for (const t of next) arrivals.set(id(t), t);
  const out: (T | undefined)[] = new Array(prev.length);
  const holes: number[] = [];
  for (let i = 0; i < prev.length; i++) {
    const t = arrivals.get(prev[i]);
    if (t === undefined) holes.push(i);
    else {
      out[i] = t;
      arrivals.delete(prev[i]);
    }
  }
  // what is left in `arrivals` is new
  let h = 0;
  for (const t of [...arrivals.values()].sort(cmp)) {
    if (h < holes.length) out[holes[h++]] = t;
    else out.push(t);
  }
  // more left than came: the tail moves into the lowest holes
  for (; h < holes.length; h++) {
    while (out.length && out[out.length - 1] === undefined) out.pop();
    if (holes[h] >= out.length) break;
    out[holes[h]] = out.pop();
  }
  while (out.length && out[out.length - 1] === undefined) out.pop();
  return out as T[];
}
