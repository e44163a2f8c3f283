// The IPVS and winkernel suites' (and the benchmark's) view of the shared
// state builders (test/fixtures/state.ts): node 1, services as [key, entry]
// pairs the way the winkernel harness feeds them.

import type { Endpoint, NodeState, Service, ServiceEndpoints } from "../../src/core/brain/state.ts";
import * as S from "../fixtures/state.ts";

export type { EndpointSpec, ProtocolName as ProtoName, ServiceSpec } from "../fixtures/state.ts";
export { endpoint, service } from "../fixtures/state.ts";

export const entry = (svc: Service, eps: Record<string, Endpoint> = {}): [string, ServiceEndpoints] => [
  S.serviceKey(svc),
  S.entry(svc, eps),
];

export function nodeState(rev: number, entries: [string, ServiceEndpoints][]): NodeState {
  return S.nodeState({ nodeName: "node1", rev, entries: entries.map(([, e]) => e) });
}

/** A new state from `prev` with some services replaced (or removed with undefined); others keep their identity. */
export function nextState(prev: NodeState, changes: Record<string, ServiceEndpoints | undefined>): NodeState {
  const set = Object.values(changes).filter((e) => e !== undefined);
  const remove = Object.keys(changes).filter((k) => changes[k] === undefined);
  return S.nextState(prev, { set, remove }).state;
}
