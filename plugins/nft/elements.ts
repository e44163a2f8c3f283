// The element store of one family: remembers every map/set element kpng
// wrote and which services want it. Two services may claim the same key (a
// shared external IP, one hairpin pair for a pod behind two services); the
// lowest service key wins, and the element goes away only when nobody wants
// it. A sync claims/unclaims for the services it re-rendered, then settles
// only the keys it touched: O(change), not O(table).
//
// Dispatch lists (render-service.ts PositionList), most elements at scale,
// are claimed a segment at a time (one cluster IP, or one slot, of a list):
// every key of a segment belongs to it alone, so the store keeps one entry
// per segment, not per element, and writes the positions whose value
// changed. Two services with the same cluster IP and port index claim the
// same segment; the lowest service key wins it whole, as for an element.

import { listKey, type PositionList } from "./render-service.ts";
import type { ElementItem } from "./transaction.ts";

/** what the kernel should hold under a key (the renderer's own object: no copy per element) */
export type Written = ElementItem;

/** the writes of one set: delete `removes` first (the kernel has them), then add `adds` */
export interface SetChange {
  set: string;
  removes: Written[];
  adds: Written[];
}

interface Entry<W> {
  key: string;
  // Almost every element has exactly one claimant: keep it inline and
  // allocate a map only for the shared ones (100,000+ elements at scale).
  owner?: string;
  want?: W;
  more?: Map<string, W>;
  written?: W;
  dirty: boolean;
}

/** claims on keys of named sets, by service; `settle` hands out the entries touched since the last one */
class Claims<W> {
  private sets = new Map<string, { entries: Map<string, Entry<W>>; dirty: Entry<W>[] }>();

  clear() {
    this.sets.clear();
  }

  private slot(set: string) {
    let s = this.sets.get(set);
    if (!s) this.sets.set(set, (s = { entries: new Map(), dirty: [] }));
    return s;
  }

  claim(set: string, key: string, svc: string, w: W) {
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

  /** the sets with entries touched since the last settle */
  touched(): string[] {
    return [...this.sets.keys()].filter((set) => this.sets.get(set)!.dirty.length);
  }

  /** for each entry of `set` touched since the last settle: what the kernel holds and what the claims want; the latter is then written */
  settle(set: string, fn: (had: W | undefined, want: W | undefined) => void) {
    const s = this.sets.get(set);
    if (!s) return;
    for (const e of s.dirty) {
      e.dirty = false;
      const want = current(e);
      fn(e.written, want);
      e.written = want;
      if (!want) s.entries.delete(e.key);
    }
    s.dirty = [];
  }
}

/** one segment of a dispatch list: `ip` undefined for a shard map slot */
interface Segment {
  ip: string | undefined;
  list: PositionList;
}

export class ElementStore {
  private elements = new Claims<Written>();
  private lists = new Claims<Segment>();

  clear() {
    this.elements.clear();
    this.lists.clear();
  }

  claim(set: string, key: string, svc: string, w: Written) {
    this.elements.claim(set, key, svc, w);
  }

  unclaim(set: string, key: string, svc: string) {
    this.elements.unclaim(set, key, svc);
  }

  /** claims every segment of a dispatch list (its positions' keys: render-service.ts listKey) */
  claimList(l: PositionList, svc: string) {
    for (const ip of l.ips ?? [undefined]) this.lists.claim(l.set, listKey(ip, l.base, 0), svc, { ip, list: l });
  }

  unclaimList(l: PositionList, svc: string) {
    for (const ip of l.ips ?? [undefined]) this.lists.unclaim(l.set, listKey(ip, l.base, 0), svc);
  }

  /** the writes that bring the kernel to what the claims say, for every key touched since the last settle, by set name */
  settle(): SetChange[] {
    const out: SetChange[] = [];
    // a set holds elements or dispatch lists, never both (names.ts)
    for (const set of [...new Set([...this.elements.touched(), ...this.lists.touched()])].sort()) {
      const change: SetChange = { set, removes: [], adds: [] };
      this.elements.settle(set, (had, want) => {
        if (had && want && had.value === want.value && had.comment === want.comment) return;
        if (had) change.removes.push(had);
        if (want) change.adds.push(want);
      });
      this.lists.settle(set, (had, want) => diffSegment(had, want, change));
      if (change.removes.length || change.adds.length) out.push(change);
    }
    return out;
  }
}

/** the positions of a segment whose value changed (both sides have the same ip and base: the key of their entry) */
function diffSegment(had: Segment | undefined, want: Segment | undefined, change: SetChange) {
  const h = had?.list.values;
  const w = want?.list.values;
  if (h === w) return;
  const { ip, list } = (want ?? had)!;
  for (let i = 0; i < Math.max(h?.length ?? 0, w?.length ?? 0); i++) {
    const a = h?.[i];
    const b = w?.[i];
    if (a === b) continue;
    const key = listKey(ip, list.base, i);
    if (a !== undefined) change.removes.push({ key });
    if (b !== undefined) change.adds.push({ key, value: b });
  }
}

/** the lowest claimant's wish; folds the extra claimants back inline when the owner left */
function current<W>(e: Entry<W>): W | undefined {
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
