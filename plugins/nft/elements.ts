// The element store of one family: remembers every map/set element kpng
// wrote and which services want it. Two services may claim the same key (a
// shared external IP, one hairpin pair for a pod behind two services); the
// lowest service key wins, and the element goes away only when nobody wants
// it. A sync claims/unclaims for the services it re-rendered, then settles
// only the keys it touched: O(change), not O(table).

import type { ElementItem } from "./transaction.ts";

/** what the kernel should hold under a key (the renderer's own object: no copy per element) */
export type Written = ElementItem;

/** the writes of one set: delete `removes` first (the kernel has them), then add `adds` */
export interface SetChange {
  set: string;
  removes: Written[];
  adds: Written[];
}

interface Entry {
  key: string;
  // Almost every element has exactly one claimant: keep it inline and
  // allocate a map only for the shared ones (100,000+ elements at scale).
  owner?: string;
  want?: Written;
  more?: Map<string, Written>;
  written?: Written;
  dirty: boolean;
}

export class ElementStore {
  private sets = new Map<string, { entries: Map<string, Entry>; dirty: Entry[] }>();

  clear() {
    this.sets.clear();
  }

  private slot(set: string) {
    let s = this.sets.get(set);
    if (!s) this.sets.set(set, (s = { entries: new Map(), dirty: [] }));
    return s;
  }

  claim(set: string, key: string, svc: string, w: Written) {
    const s = this.slot(set);
    let e = s.entries.get(key);
    if (!e) {
      // the common case (every element of a full sync): one object, all fields set at once
      s.entries.set(key, (e = { key, owner: svc, want: w, more: undefined, written: undefined, dirty: true }));
      s.dirty.push(e);
      return;
    }
    if (e.owner === undefined || e.owner === svc) {
      e.owner = svc;
      e.want = w;
    } else (e.more ??= new Map()).set(svc, w);
    if (!e.dirty) {
      e.dirty = true;
      s.dirty.push(e);
    }
  }

  unclaim(set: string, key: string, svc: string) {
    const s = this.sets.get(set);
    const e = s?.entries.get(key);
    if (!s || !e) return;
    if (e.owner === svc) e.owner = e.want = undefined;
    else e.more?.delete(svc);
    if (!e.dirty) {
      e.dirty = true;
      s.dirty.push(e);
    }
  }

  /** the writes that bring the kernel to what the claims say, for every key touched since the last settle, by set name */
  settle(): SetChange[] {
    const out: SetChange[] = [];
    for (const set of [...this.sets.keys()].sort()) {
      const s = this.sets.get(set)!;
      if (!s.dirty.length) continue;
      const change: SetChange = { set, removes: [], adds: [] };
      for (const e of s.dirty) {
        e.dirty = false;
        const want = current(e);
        const had = e.written;
        if (had && want && had.value === want.value && had.comment === want.comment) continue;
        if (had) change.removes.push(had);
        if (want) change.adds.push(want);
        e.written = want;
        if (!want) s.entries.delete(e.key);
      }
      s.dirty = [];
      if (change.removes.length || change.adds.length) out.push(change);
    }
    return out;
  }
}

/** the lowest claimant's wish; folds the extra claimants back inline when the owner left */
function current(e: Entry): Written | undefined {
  if (e.more?.size) {
    let owner = e.owner;
    let want = e.want;
    for (const [k, w] of e.more) if (owner === undefined || k < owner) [owner, want] = [k, w];
    if (owner !== e.owner) {
      if (e.owner !== undefined) e.more.set(e.owner, e.want!);
      e.more.delete(owner!);
      [e.owner, e.want] = [owner, want];
    }
  }
  return e.want;
}
