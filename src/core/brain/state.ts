// The node-local state: what the brain computes and every backend consumes.
// Services and endpoints are the generated localv1 messages; a NodeState is an
// immutable snapshot. Unchanged services keep the *same object* from one
// revision to the next, so consumers can find what changed by identity.

import type { Endpoint, Service } from "../../gen/localv1/services_pb.ts";

export type { Endpoint, Service };

export interface ServiceEndpoints {
  readonly service: Service;
  /** keyed by endpoint key: pod name, or a stable hash when there is no pod */
  readonly endpoints: ReadonlyMap<string, Endpoint>;
}

export interface NodeState {
  readonly nodeName: string;
  readonly rev: number;
  /** keyed by `namespace/name` */
  readonly services: ReadonlyMap<string, ServiceEndpoints>;
  /**
   * This node's IPs (brain/node-ips.ts: the Node's addresses, or the
   * operator's override), primary first, at most one per family. A change is
   * a new revision whose change set is null (everything re-rendered). Absent
   * when the state came over the localv1 wire, which does not carry them: a
   * sidecar backend then uses Config.nodeIPs (its --node-ip flags).
   */
  readonly nodeIPs?: readonly string[];
}

/**
 * What changed between two revisions: the keys of services that were added,
 * updated (service or any endpoint) or removed. `null` means "assume
 * everything changed" (first sync, after a failure, or the node's IPs changed).
 */
export type StateChange = ReadonlySet<string> | null;

export const serviceKey = (namespace: string, name: string) => `${namespace}/${name}`;

/** [namespace, name] of a serviceKey (a namespace holds no "/") */
export function splitServiceKey(key: string): [string, string] {
  const i = key.indexOf("/");
  return [key.slice(0, i), key.slice(i + 1)];
}
