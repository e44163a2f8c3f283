// Helpers every backend needs to read the node-local state the same way.

import type { Endpoint, PortMapping } from "../gen/localv1/services_pb.ts";

/**
 * The port an endpoint serves a service port on: its PortOverride of the same
 * name (the EndpointSlice port, which resolves named target ports), else the
 * service's numeric targetPort, else the service port itself.
 */
export function targetPort(ep: Endpoint, pm: PortMapping): number {
  const o = ep.PortOverrides.find((p) => p.Name === pm.Name);
  return o?.Port || pm.TargetPort || pm.Port;
}
