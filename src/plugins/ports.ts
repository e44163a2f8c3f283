// Helpers every backend needs to read the node-local state the same way.

import type { Endpoint, PortMapping, Service } from "../gen/localv1/services_pb.ts";
import { DEFAULT_AFFINITY_TIMEOUT_SECONDS } from "../core/brain/model/service.ts";

/**
 * The port an endpoint serves a service port on: its PortOverride of the same
 * name (the EndpointSlice port, which resolves named target ports), else the
 * service's numeric targetPort, else the service port itself.
 */
export function targetPort(ep: Endpoint, pm: PortMapping): number {
  const o = ep.PortOverrides.find((p) => p.Name === pm.Name);
  return o?.Port || pm.TargetPort || pm.Port;
}

/**
 * ClientIP affinity timeout in seconds, or undefined without affinity. The
 * brain always fills the timeout; the default covers a brain that does not
 * (kpng's wire format leaves 0 meaning "unset").
 */
export function affinitySeconds(svc: Service): number | undefined {
  return svc.SessionAffinity.case === "ClientIP" ? svc.SessionAffinity.value.TimeoutSeconds || DEFAULT_AFFINITY_TIMEOUT_SECONDS : undefined;
}
