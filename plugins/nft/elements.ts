// The element store of one family: remembers every map/set element kpng
// wrote and which services want it. Two services may claim the same key (a
// shared external IP, one hairpin pair for a pod behind two services); the
// lowest service key wins, and the element goes away only when nobody wants
// it. A sync claims/unclaims for the services it re-rendered, then settles
// only the keys it touched: O(change), not O(table).

export interface Written {
  value?: string;
  comment?: string;
}

export interface ElementChange {
  set: string;
  key: string;
  /** what to delete first (the kernel has it) */
  remove: boolean;
  /** what to add (undefined = nothing) */
  add?: Written;
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
    if (!e) s.entries.set(key, (e = { key, dirty: false }));
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

  /** the writes that bring the kernel to what the claims say, for every key touched since the last settle */
  settle(): ElementChange[] {
    const out: ElementChange[] = [];
    for (const set of [...this.sets.keys()].sort()) {
      const s = this.sets.get(set)!;
      for (const e of s.dirty) {
        e.dirty = false;
        const want = current(e);
        const had = e.written;
        if (had && want && had.value === want.value && had.comment === want.comment) continue;
        if (had || want) out.push({ set, key: e.key, remove: !!had, add: want });
        e.written = want;
        if (!want) s.entries.delete(e.key);
      }
      s.dirty = [];
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
