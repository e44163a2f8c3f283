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
}

/**
 * What changed between two revisions: the keys of services that were added,
 * updated (service or any endpoint) or removed. `null` means "assume
 * everything changed" (first sync, or after a failure).
 */
export type StateChange = ReadonlySet<string> | null;

export const serviceKey = (namespace: string, name: string) => `${namespace}/${name}`;
