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

import { ListElement, listKey, type PositionList } from "./render-service.ts";
import type { ElementSpec } from "./transaction.ts";

/** what the kernel should hold under a key, and who wants it (the renderer's own object: no copy per element) */
export type Written = ElementSpec & { owner: string };

/** the writes of one set: delete `removes` first (the kernel has them), then add `adds` */
export interface SetChange {
  set: string;
  removes: ElementSpec[];
  adds: ElementSpec[];
}

/**
 * A key that is being changed, or claimed by several services. A key
 * settled with one claimant (nearly all of them: 40,000 at 10,000 services
 * of 10 endpoints) has no entry: the store holds the claimant's own object,
 * which names its owner and is what the kernel holds.
 */
class Entry<W> {
  constructor(
    readonly key: string,
    public owner: string | undefined,
    public want: W | undefined,
    public written: W | undefined,
  ) {}
  // the other claimants (rare: a map only for them)
  more?: Map<string, W> = undefined;
  dirty = false;
}

interface SetClaims<W> {
  entries: Map<string, W | Entry<W>>;
  dirty: Entry<W>[];
  /**
   * Until its first settle the kernel holds nothing of the set (a full sync
   * claims every key of every set from scratch): a key's first claim stores
   * the claimant's object as it is, with no entry, and `fresh` keeps the
   * keys in the order they came. A second claim or an unclaim still makes an
   * entry (one that wrote nothing).
   */
  settled: boolean;
  fresh: string[];
  /** the first claim of each key of `fresh`, and how many of those keys got an entry since (none: `fresh` is read without lookups) */
  firstClaims: W[];
  entered: number;
}

/** claims on keys of named sets, by service (`W.owner`); `settle` hands out the keys touched since the last one */
class Claims<W extends { owner: string }> {
  private sets = new Map<string, SetClaims<W>>();

  clear() {
    this.sets.clear();
  }

  /** the entry of a key about to change, marked dirty; a settled key gets one again */
  private touch(s: SetClaims<W>, key: string, v: W | Entry<W> | undefined): Entry<W> {
    let e: Entry<W>;
    if (v instanceof Entry) e = v;
    else {
      s.entries.set(key, (e = new Entry<W>(key, v?.owner, v, s.settled ? v : undefined)));
      if (!s.settled) s.entered++;
    }
    if (!e.dirty) {
      e.dirty = true;
      // an unsettled set's keys are all in `fresh` already
      if (s.settled) s.dirty.push(e);
    }
    return e;
  }

  claim(set: string, key: string, w: W) {
    let s = this.sets.get(set);
    if (!s) this.sets.set(set, (s = { entries: new Map(), dirty: [], settled: false, fresh: [], firstClaims: [], entered: 0 }));
    const v = s.entries.get(key);
    if (v === undefined && !s.settled) {
      s.entries.set(key, w);
      s.fresh.push(key);
      s.firstClaims.push(w);
      return;
    }
    const e = this.touch(s, key, v);
    if (e.owner === undefined || e.owner === w.owner) {
      e.owner = w.owner;
      e.want = w;
    } else (e.more ??= new Map()).set(w.owner, w);
  }

  unclaim(set: string, key: string, svc: string) {
    const s = this.sets.get(set);
    const v = s?.entries.get(key);
    // settled with another owner: `svc` has no claim here
    if (!s || v === undefined || (!(v instanceof Entry) && v.owner !== svc)) return;
    const e = this.touch(s, key, v);
    if (e.owner === svc) e.owner = e.want = undefined;
    else e.more?.delete(svc);
  }

  /** the sets with keys touched since the last settle */
  touched(): string[] {
    return [...this.sets.keys()].filter((set) => {
      const s = this.sets.get(set)!;
      return s.dirty.length || s.fresh.length;
    });
  }

  /** for each key of `set` touched since the last settle: what the kernel holds and what the claims want; the latter is then written */
  settle(set: string, fn: (key: string, had: W | undefined, want: W | undefined) => void) {
    const s = this.sets.get(set);
    if (!s) return;
    if (!s.settled) {
      for (let i = 0; i < s.fresh.length; i++) {
        const key = s.fresh[i];
        const v = s.entered ? s.entries.get(key)! : s.firstClaims[i];
        if (v instanceof Entry) settleEntry(s, v, fn);
        else fn(key, undefined, v);
      }
      s.settled = true;
      s.fresh = [];
      s.firstClaims = [];
      return;
    }
    for (const e of s.dirty) settleEntry(s, e, fn);
    s.dirty = [];
  }
}

function settleEntry<W>(s: SetClaims<W>, e: Entry<W>, fn: (key: string, had: W | undefined, want: W | undefined) => void) {
  e.dirty = false;
  const want = current(e);
  fn(e.key, e.written, want);
  e.written = want;
  if (!want) s.entries.delete(e.key);
  // one claimant left: its object alone (its owner is the entry's)
  else if (!e.more?.size) s.entries.set(e.key, want);
}

export class ElementStore {
  private elements = new Claims<Written>();
  private lists = new Claims<PositionList>();

  clear() {
    this.elements.clear();
    this.lists.clear();
  }

  /** `w.owner` wants `w` under `set`/`w.key` */
  claim(set: string, w: Written) {
    this.elements.claim(set, w.key, w);
  }

  unclaim(set: string, key: string, svc: string) {
    this.elements.unclaim(set, key, svc);
  }

  /** claims every segment of a dispatch list, under the key of its first position (render-service.ts listKey) */
  claimList(l: PositionList) {
    for (const ip of l.ips ?? [undefined]) this.lists.claim(l.set, listKey(ip, l.base, 0), l);
  }

  unclaimList(l: PositionList) {
    for (const ip of l.ips ?? [undefined]) this.lists.unclaim(l.set, listKey(ip, l.base, 0), l.owner);
  }

  /** the writes that bring the kernel to what the claims say, for every key touched since the last settle, by set name */
  settle(): SetChange[] {
    const out: SetChange[] = [];
    // a set holds elements or dispatch lists, never both (names.ts)
    for (const set of [...new Set([...this.elements.touched(), ...this.lists.touched()])].sort()) {
      const change: SetChange = { set, removes: [], adds: [] };
      this.elements.settle(set, (_, had, want) => {
        if (had && want && had.value === want.value && had.comment === want.comment) return;
        if (had) change.removes.push(had);
        if (want) change.adds.push(want);
      });
      this.lists.settle(set, (key, had, want) => diffSegment(key, had, want, change));
      if (change.removes.length || change.adds.length) out.push(change);
    }
    return out;
  }
}

/**
 * The positions of a list segment whose value changed. Both lists have the
 * segment's cluster IP (if any) and base: the key of its first position,
 * `first`.
 */
function diffSegment(first: string, had: PositionList | undefined, want: PositionList | undefined, change: SetChange) {
  const h = had?.values;
  const w = want?.values;
  if (h === w) return;
  const l = (want ?? had)!;
  const ip = l.ips === undefined ? undefined : l.ips.length === 1 ? l.ips[0] : l.ips.find((ip) => listKey(ip, l.base, 0) === first);
  if (!h) {
    // a new segment (every one of a full sync): each position is written
    for (let i = 0; i < w!.length; i++) change.adds.push(new ListElement(ip, l.base + i, w![i]));
    return;
  }
  const n = Math.max(h.length, w?.length ?? 0);
  for (let i = 0; i < n; i++) {
    const a = h[i];
    const b = w?.[i];
    if (a === b) continue;
    if (a !== undefined) change.removes.push(new ListElement(ip, l.base + i));
    if (b !== undefined) change.adds.push(new ListElement(ip, l.base + i, b));
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
