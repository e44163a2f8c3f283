// `kpng verify` for IPVS: the kernel read back as a full sync reads it
// (`ipvsadm -Sn`, `ipset save`, the addresses of kube-ipvs0: parse.ts)
// compared with the desired picture the last sync programmed (plan.ts).
// Each Service's virtual servers, real servers, bound addresses and set
// entries are named by Service and frontend. A TCP real server at weight 0
// that no Service wants is kpng's own graceful removal (plan.ts), not a
// difference; so is a virtual server kpng does not own (ownedVirtualServers).
// Pure.

import { type Drift, frontendName } from "../../src/host/toolkit/index.ts";
import { type KernelModel, type VirtualServer, drainsGracefully, rsKey } from "./model.ts";
import { type DesiredState, ownedVirtualServers } from "./plan.ts";
import { serviceFlag } from "./print.ts";

const frontendOf = (vs: VirtualServer) => frontendName({ ip: vs.ip, port: vs.port, protocol: vs.proto });
const serverText = (vs: VirtualServer) => `-A ${serviceFlag(vs)} -s ${vs.scheduler}${vs.persistence ? ` -p ${vs.persistence}` : ""}`;

export function compareIpvs(desired: DesiredState, kernel: KernelModel): Drift[] {
  const out: Drift[] = [];
  const drift = (service: string, frontend: string, kind: Drift["kind"], detail: string) => out.push({ service, frontend, kind, detail });
  const wantedVs = new Set<string>();
  const wantedAddresses = new Set<string>();
  const wantedEntries = new Set<string>();
  for (const [key, model] of desired.services) {
    for (const [k, v] of model.virtualServices) {
      // two Services on one address:port: the winner's (plan.ts) is what was programmed
      if (desired.virtualService(k) !== v) continue;
      wantedVs.add(k);
      const f = frontendOf(v.vs);
      const have = kernel.virtualServices.get(k);
      if (!have) {
        drift(key, f, "missing", `virtual server ${serverText(v.vs)} (and its ${v.reals.size} real servers)`);
        continue;
      }
      if (have.vs.scheduler !== v.vs.scheduler || have.vs.persistence !== v.vs.persistence)
        drift(key, f, "differs", `virtual server ${serverText(v.vs)}, kernel holds ${serverText(have.vs)}`);
      for (const [rk, rs] of v.reals) {
        const h = have.reals.get(rk);
        if (!h) drift(key, f, "missing", `real server ${rk} weight ${rs.weight}`);
        else if (h.weight !== rs.weight) drift(key, f, "differs", `real server ${rk} weight ${rs.weight}, kernel holds weight ${h.weight}`);
      }
      for (const [rk, h] of have.reals) {
        if (v.reals.has(rk) || (h.weight === 0 && drainsGracefully(v.vs.proto))) continue;
        drift(key, f, "extra", `real server ${rsKey(h)} weight ${h.weight}`);
      }
    }
    for (const a of model.addresses) {
      wantedAddresses.add(a);
      if (!kernel.addresses.has(a)) drift(key, a, "missing", `address ${a} on kube-ipvs0`);
    }
    for (const e of model.entries) {
      wantedEntries.add(e);
      if (!kernel.entries.has(e)) drift(key, "", "missing", `ipset entry ${e}`);
    }
  }
  for (const k of ownedVirtualServers(kernel))
    if (!wantedVs.has(k))
      drift("", frontendOf(kernel.virtualServices.get(k)!.vs), "extra", `virtual server ${serverText(kernel.virtualServices.get(k)!.vs)}`);
  for (const a of kernel.addresses) if (!wantedAddresses.has(a)) drift("", a, "extra", `address ${a} on kube-ipvs0`);
  for (const e of kernel.entries) if (!wantedEntries.has(e)) drift("", "", "extra", `ipset entry ${e}`);
  return out;
}
