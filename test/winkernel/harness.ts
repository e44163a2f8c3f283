// Drives the winkernel backend against the fake HNS, feeding it the way the
// client library does: set* calls, then sync.

import { defaultConfig, type Config } from "../../src/core/config/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { createWinkernelBackend, type WinkernelBackend } from "../../plugins/winkernel/backend.ts";
import type { HcnLoadBalancer, HnsCall } from "../../plugins/winkernel/hns.ts";
import { type HnsRecorder, type HnsRecorderOptions, fakeGuid, hnsRecorder } from "../../plugins/winkernel/recorder.ts";
import { remoteEndpointSettings } from "../../plugins/winkernel/settings.ts";
import { v4 } from "../fixtures/addresses.ts";

export const N1 = v4.node(1);
/** the host's address on the pod network, used as the load balancers' source VIP */
export const SRC = v4.pod(1, 2);

export function testConfig(o: Partial<Config> = {}): Config {
  return defaultConfig({
    nodeName: "node1",
    nodeIPs: [N1],
    winkernel: { sourceVip: SRC, networkName: "kpng-test", enableDSR: false },
    ...o,
  });
}

export interface Rig {
  backend: WinkernelBackend;
  hns: HnsRecorder;
  log: ReturnType<typeof memoryLogger>;
}

export function rig(config: Config = testConfig(), hns: HnsRecorder = hnsRecorder()): Rig {
  const log = memoryLogger();
  return { backend: createWinkernelBackend({ config, log, out: () => {} }, { hns }), hns, log };
}

/** What the client library does for each service of a change set. */
export function send(backend: WinkernelBackend, entries: [string, ServiceEndpoints][]) {
  for (const [, se] of entries) {
    backend.setService(se.service);
    for (const [k, ep] of se.endpoints) backend.setEndpoint(se.service.Namespace, se.service.Name, k, ep);
  }
}

/** A rig whose first (empty) sync already ran, with pods on this node known to HNS. */
export async function primedRig(localPods: string[] = [], config?: Config, opts: HnsRecorderOptions = {}) {
  const r = rig(config, hnsRecorder(opts));
  for (const ip of localPods) r.hns.addLocalEndpoint(ip);
  await r.backend.sync();
  r.hns.clear();
  return r;
}

export const remoteEp = (id: number, ip: string): HnsCall => ({
  call: "HcnCreateEndpoint",
  id: fakeGuid(id),
  settings: remoteEndpointSettings(ip),
});

export interface LbSpec {
  eps: number[];
  vip?: string;
  src?: string;
  proto?: number;
  internal: number;
  external: number;
  flags?: number;
  portFlags?: number;
  dist?: number;
}

/** The HCN JSON of a load balancer, fields left out when zero as hcsshim's omitempty does. */
export function lb(s: LbSpec): HcnLoadBalancer {
  const pm: HcnLoadBalancer["PortMappings"][number] = { Protocol: s.proto ?? 6, InternalPort: s.internal, ExternalPort: s.external };
  if (s.dist) pm.DistributionType = s.dist;
  if (s.portFlags) pm.Flags = s.portFlags;
  const out: HcnLoadBalancer = { SchemaVersion: { Major: 2, Minor: 0 }, HostComputeEndpoints: s.eps.map(fakeGuid), PortMappings: [pm] };
  if ((s.src ?? SRC) !== "") out.SourceVIP = s.src ?? SRC;
  if (s.vip) out.FrontendVIPs = [s.vip];
  if (s.flags) out.Flags = s.flags;
  return out;
}

export const createLb = (id: number, s: LbSpec): HnsCall => ({ call: "HcnCreateLoadBalancer", id: fakeGuid(id), settings: lb(s) });
export const modifyLb = (id: number, s: LbSpec): HnsCall => ({ call: "HcnModifyLoadBalancer", id: fakeGuid(id), settings: lb(s) });
export const deleteLb = (id: number): HnsCall => ({ call: "HcnDeleteLoadBalancer", id: fakeGuid(id) });
export const deleteEp = (id: number): HnsCall => ({ call: "HcnDeleteEndpoint", id: fakeGuid(id) });
