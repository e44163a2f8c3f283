// Plans the map writes for a sync: desired groups (render-service.ts) against what
// the maps hold (a mirror: what kpng wrote, or what a new process read back
// from the pinned maps), for the changed services only; a full sync also
// deletes what no service owns. Ids and slots are sticky: a group keeps its
// id (adopted from the kernel's frontend entries after a restart), an
// endpoint keeps its slot while it stays, so an unchanged service costs no
// write and ClientIP affinity (which remembers a slot) survives changes.
//
// Ops come out in the order that never lets a program see a frontend whose
// group or slots are missing: endpoints, groups, frontends written, then
// frontends, groups, endpoints deleted.

import type { NodeState, StateChange } from "../../src/host/toolkit/index.ts";
import { canonical, frontId, type BackendValue, type FrontKey, type GroupValue, type MapOp } from "./maps.ts";
import { MAP } from "./names.ts";
import { renderService, type GroupSpec } from "./render-service.ts";
import type { MapContents } from "./executor.ts";
import type { ProgrammedMaps } from "./verify.ts";

/** what one service owns: arrays, not maps (a service has a handful of each; 10,000s of services) */
interface Owned {
  groups: { name: string; id: number }[];
  fronts: { fid: string; key: FrontKey }[];
}

const NOTHING: Owned = { groups: [], fronts: [] };

const sameGroup = (a: GroupValue | undefined, b: GroupValue) =>
  !!a && a.count === b.count && a.affinity === b.affinity && a.flags === b.flags;
// Addresses read back from the maps are in RFC 5952 form, the state's as the API server spelled them.
const sameBackend = (a: BackendValue | undefined, b: BackendValue) =>
  !!a && a.port === b.port && (a.addr === b.addr || canonical(a.addr) === canonical(b.addr));
const epId = (b: BackendValue) => `${b.addr.includes(":") ? canonical(b.addr) : b.addr}|${b.port}`;

/**
 * New slot contents: an endpoint that stays keeps its slot when it is below
 * the new count; the others fill the free slots in order.
 */
export function assignSlots(prev: readonly (BackendValue | undefined)[], next: readonly BackendValue[]): BackendValue[] {
  // the usual cases (a new group; an unchanged one) without building ids
  if (prev.length === 0) return [...next];
  if (prev.length === next.length && next.every((b, i) => prev[i]?.addr === b.addr && prev[i]?.port === b.port)) return [...next];
  const out: (BackendValue | undefined)[] = new Array(next.length);
  const placed = new Set<string>();
  const wanted = new Set(next.map(epId));
  for (let i = 0; i < Math.min(prev.length, next.length); i++) {
    const p = prev[i];
    if (p && wanted.has(epId(p)) && !placed.has(epId(p))) {
      out[i] = p;
      placed.add(epId(p));
    }
  }
  let free = 0;
  for (const b of next) {
    if (placed.has(epId(b))) continue;
    while (out[free]) free++;
    out[free] = b;
  }
  return out as BackendValue[];
}

export class MapPlanner {
  /** what the maps hold */
  private front = new Map<string, { key: FrontKey; group: number }>();
  private group = new Map<number, GroupValue>();
  private slots = new Map<number, (BackendValue | undefined)[]>();
  /** per service key */
  private owned = new Map<string, Owned>();
  private ids = new Set<number>();
  private freeIds: number[] = [];
  private nextId = 1;

  /** Starts over from what the kernel holds (a new process, or after a failed write). */
  load(c: MapContents) {
    this.front = new Map(c.front.map((e) => [frontId(e.key), e]));
    this.group = new Map(c.group);
    this.slots = new Map();
    for (const b of c.backend) {
      const list = this.slots.get(b.id) ?? [];
      list[b.slot] = b.value;
      this.slots.set(b.id, list);
    }
    this.owned = new Map();
    this.ids = new Set();
    this.freeIds = [];
    let max = 0;
    for (const id of this.group.keys()) max = Math.max(max, id);
    for (const id of this.slots.keys()) max = Math.max(max, id);
    for (const e of c.front) max = Math.max(max, e.group);
    this.nextId = max + 1;
  }

  /** The ops for `change` (null: everything); the mirror assumes they will be applied (else call `load`). */
  plan(state: NodeState, change: StateChange, nodeIPs: readonly string[]): MapOp[] {
    const keys = change ?? new Set([...state.services.keys(), ...this.owned.keys()]);
    const w = {
      backend: [] as MapOp[],
      group: [] as MapOp[],
      front: [] as MapOp[],
      delFront: [] as MapOp[],
      delGroup: [] as MapOp[],
      delBackend: [] as MapOp[],
    };
    const released: number[] = [];
    for (const key of keys) {
      const se = state.services.get(key);
      const specs = se ? renderService(key, se, nodeIPs) : [];
      this.planService(key, specs, w, released);
    }
    if (change === null) this.dropOrphans(w);
    // ids are reused only by a later sync: this one may still delete their old slots
    this.freeIds.push(...released);
    return [...w.backend, ...w.group, ...w.front, ...w.delFront, ...w.delGroup, ...w.delBackend];
  }

  private planService(key: string, specs: GroupSpec[], w: Record<string, MapOp[]>, released: number[]) {
    const old = this.owned.get(key) ?? NOTHING;
    const now: Owned = { groups: [], fronts: [] };
    for (const g of specs) {
      const id = old.groups.find((o) => o.name === g.name)?.id ?? this.adopt(g) ?? this.allocate();
      now.groups.push({ name: g.name, id });
      const prev = this.slots.get(id) ?? [];
      const next = assignSlots(prev, g.endpoints);
      for (let slot = 0; slot < next.length; slot++)
        if (!sameBackend(prev[slot], next[slot])) w.backend.push({ map: MAP.backend, op: "update", id, slot, value: next[slot] });
      for (let slot = next.length; slot < prev.length; slot++)
        if (prev[slot]) w.delBackend.push({ map: MAP.backend, op: "delete", id, slot });
      this.slots.set(id, next);
      const value: GroupValue = { count: g.endpoints.length, affinity: g.affinity, flags: g.flags };
      if (!sameGroup(this.group.get(id), value)) {
        w.group.push({ map: MAP.group, op: "update", id, value });
        this.group.set(id, value);
      }
      for (const key of g.frontends) {
        const fid = frontId(key);
        now.fronts.push({ fid, key });
        const cur = this.front.get(fid);
        if (cur?.group === id) continue;
        w.front.push({ map: MAP.front, op: "update", key, group: id });
        this.front.set(fid, { key, group: id });
      }
    }
    for (const { fid, key } of old.fronts) {
      if (now.fronts.some((f) => f.fid === fid)) continue;
      const cur = this.front.get(fid);
      // another service took the address since: its entry stays
      if (cur && !old.groups.some((o) => o.id === cur.group)) continue;
      w.delFront.push({ map: MAP.front, op: "delete", key });
      this.front.delete(fid);
    }
    for (const { name, id } of old.groups) {
      if (now.groups.some((g) => g.name === name)) continue;
      this.deleteGroup(id, w);
      released.push(id);
    }
    if (specs.length) this.owned.set(key, now);
    else this.owned.delete(key);
  }

  private deleteGroup(id: number, w: Record<string, MapOp[]>) {
    w.delGroup.push({ map: MAP.group, op: "delete", id });
    (this.slots.get(id) ?? []).forEach((b, slot) => {
      if (b) w.delBackend.push({ map: MAP.backend, op: "delete", id, slot });
    });
    this.group.delete(id);
    this.slots.delete(id);
    this.ids.delete(id);
  }

  /** after a full sync: what no service owns (left by an earlier process) goes */
  private dropOrphans(w: Record<string, MapOp[]>) {
    const ownedFronts = new Set<string>();
    for (const o of this.owned.values()) for (const f of o.fronts) ownedFronts.add(f.fid);
    for (const [fid, e] of this.front) {
      if (ownedFronts.has(fid)) continue;
      w.delFront.push({ map: MAP.front, op: "delete", key: e.key });
      this.front.delete(fid);
    }
    for (const id of new Set([...this.group.keys(), ...this.slots.keys()])) if (!this.ids.has(id)) this.deleteGroup(id, w);
  }

  /** the id the kernel's entries give one of the group's frontends, if no other group has it yet */
  private adopt(g: GroupSpec): number | undefined {
    for (const k of g.frontends) {
      const id = this.front.get(frontId(k))?.group;
      if (id !== undefined && !this.ids.has(id)) {
        this.ids.add(id);
        return id;
      }
    }
    return undefined;
  }

  private allocate(): number {
    let id = this.freeIds.pop();
    while (id === undefined || this.ids.has(id)) id = id === undefined ? this.nextId++ : this.freeIds.pop();
    this.ids.add(id);
    return id;
  }

  /** what the maps hold by the mirror, entry by entry with the Service that owns it (verify.ts); entries nobody owns are left out */
  programmed(): ProgrammedMaps {
    const out: ProgrammedMaps = { fronts: [], groups: [] };
    for (const [service, o] of this.owned) {
      for (const g of o.groups) {
        const value = this.group.get(g.id);
        if (value) out.groups.push({ service, id: g.id, value, slots: this.slots.get(g.id) ?? [] });
      }
      for (const { fid, key } of o.fronts) {
        const cur = this.front.get(fid);
        // another Service took the address since (planService): its entry
        if (cur && o.groups.some((g) => g.id === cur.group)) out.fronts.push({ service, key, group: cur.group });
      }
    }
    return out;
  }

  /** entries per map, for logs and benchmarks */
  get sizes() {
    let backends = 0;
    for (const s of this.slots.values()) backends += s.filter(Boolean).length;
    return { front: this.front.size, group: this.group.size, backend: backends };
  }
}
