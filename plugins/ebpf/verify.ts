// `kpng verify` for ebpf: the three maps kpng writes, read back (one dump,
// executor.ts), compared with what the planner last wrote (plan.ts's
// mirror, by the Service that owns each entry). Each frontend entry, group
// and endpoint slot missing, extra or holding another value is named by
// Service and frontend. The LRU maps are the programs' own and not compared.
// Pure.

import { type Drift, frontendName } from "../../src/host/toolkit/index.ts";
import type { MapContents } from "./executor.ts";
import { type BackendValue, canonical, type FrontKey, frontId, type GroupValue } from "./maps.ts";
import { MAP } from "./names.ts";

/** what the planner wrote, by owner (MapPlanner.programmed) */
export interface ProgrammedMaps {
  fronts: Array<{ service: string; key: FrontKey; group: number }>;
  groups: Array<{ service: string; id: number; value: GroupValue; slots: readonly (BackendValue | undefined)[] }>;
}

const PROTOCOLS: Record<number, string> = { 6: "tcp", 17: "udp", 132: "sctp" };
const frontendOf = (k: FrontKey) => frontendName({ ip: k.addr, port: k.port, protocol: PROTOCOLS[k.proto] ?? String(k.proto) });
const groupText = (g: GroupValue) => `count=${g.count} affinity=${g.affinity} flags=${g.flags}`;
const backendText = (b: BackendValue) => (b.addr.includes(":") ? `[${b.addr}]:${b.port}` : `${b.addr}:${b.port}`);
const sameBackend = (a: BackendValue, b: BackendValue) => a.port === b.port && canonical(a.addr) === canonical(b.addr);

export function compareMaps(want: ProgrammedMaps, got: MapContents): Drift[] {
  const out: Drift[] = [];
  const drift = (service: string, frontend: string, kind: Drift["kind"], detail: string) => out.push({ service, frontend, kind, detail });
  // a group's and its slots' frontends, as the frontends that reach it name them
  const frontendsOf = new Map<number, string[]>();
  for (const f of want.fronts) frontendsOf.set(f.group, [...(frontendsOf.get(f.group) ?? []), frontendOf(f.key)]);
  const groupFrontend = (id: number) => (frontendsOf.get(id) ?? []).join(", ");

  const held = new Map(got.front.map((f) => [frontId(f.key), f]));
  const wanted = new Set<string>();
  for (const f of want.fronts) {
    const fid = frontId(f.key);
    wanted.add(fid);
    const h = held.get(fid);
    if (!h) drift(f.service, frontendOf(f.key), "missing", `${MAP.front} entry -> group ${f.group}`);
    else if (h.group !== f.group)
      drift(f.service, frontendOf(f.key), "differs", `${MAP.front} entry -> group ${f.group}, map holds group ${h.group}`);
  }
  for (const [fid, h] of held) if (!wanted.has(fid)) drift("", frontendOf(h.key), "extra", `${MAP.front} entry -> group ${h.group}`);

  const slotsHeld = new Map<number, Map<number, BackendValue>>();
  for (const b of got.backend) {
    let s = slotsHeld.get(b.id);
    if (!s) slotsHeld.set(b.id, (s = new Map()));
    s.set(b.slot, b.value);
  }
  const groups = new Set<number>();
  for (const g of want.groups) {
    groups.add(g.id);
    const f = groupFrontend(g.id);
    const h = got.group.get(g.id);
    if (!h) drift(g.service, f, "missing", `${MAP.group} ${g.id} ${groupText(g.value)}`);
    else if (groupText(h) !== groupText(g.value))
      drift(g.service, f, "differs", `${MAP.group} ${g.id} ${groupText(g.value)}, map holds ${groupText(h)}`);
    const slots = slotsHeld.get(g.id) ?? new Map<number, BackendValue>();
    g.slots.forEach((b, slot) => {
      if (!b) return;
      const hb = slots.get(slot);
      if (!hb) drift(g.service, f, "missing", `${MAP.backend} group ${g.id} slot ${slot} -> ${backendText(b)}`);
      else if (!sameBackend(hb, b))
        drift(g.service, f, "differs", `${MAP.backend} group ${g.id} slot ${slot} -> ${backendText(b)}, map holds ${backendText(hb)}`);
    });
    for (const [slot, hb] of slots)
      if (!g.slots[slot]) drift(g.service, f, "extra", `${MAP.backend} group ${g.id} slot ${slot} -> ${backendText(hb)}`);
  }
  for (const [id, h] of got.group) if (!groups.has(id)) drift("", "", "extra", `${MAP.group} ${id} ${groupText(h)}`);
  for (const [id, slots] of slotsHeld)
    if (!groups.has(id))
      for (const [slot, hb] of slots) drift("", "", "extra", `${MAP.backend} group ${id} slot ${slot} -> ${backendText(hb)}`);
  return out;
}
