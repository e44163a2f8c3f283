// A node agent's copy of the global model: change sets of the globalv1
// stream in, the cluster events that bring the brain's index up to date out.
// Each item keeps its wire bytes, so a resent unchanged item (after a
// reconnect, to the same brain or another) makes no event: a resync costs
// the brain, and the backends behind it, only the real differences.

import { Set as SetKind } from "../../gen/localv1/services_pb.ts";
import type { ChangeSet } from "../api/client/replica.ts";
import type { ClusterEvent } from "../brain/cluster.ts";
import { errorMessage } from "../errors.ts";
import { decodeEndpointInfo, decodeNodeInfo, decodeServiceInfo, sliceOf, type DecodedEndpoint } from "./decode.ts";
import { splitGlobalPath } from "./encode.ts";

interface EndpointItem {
  bytes: Uint8Array;
  decoded: DecodedEndpoint;
}

const sameBytes = (a: Uint8Array, b: Uint8Array) => a === b || Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);

export class GlobalMirror {
  private readonly services = new Map<string, Uint8Array>();
  private readonly nodes = new Map<string, Uint8Array>();
  /** `ns|svc|slice` -> endpoint path -> item */
  private readonly slices = new Map<string, Map<string, EndpointItem>>();
  /** counters: items decoded, items resent unchanged */
  readonly stats = { decoded: 0, unchanged: 0 };

  get size() {
    let eps = 0;
    for (const s of this.slices.values()) eps += s.size;
    return { services: this.services.size, nodes: this.nodes.size, endpoints: eps };
  }

  /**
   * One complete change set -> events. After a Reset, whatever the new
   * stream did not send again is gone. `onBad` hears items that do not
   * decode (skipped; the rest of the change set applies).
   */
  apply(cs: ChangeSet, onBad: (error: string) => void): ClusterEvent[] {
    const events: ClusterEvent[] = [];
    const touched = new Set<string>();
    const stale = cs.reset ? { services: new Set(this.services.keys()), nodes: new Set(this.nodes.keys()), slices: this.allEndpointPaths() } : null;
    for (const op of cs.ops) {
      try {
        if (op.op === "set") {
          if (op.set === SetKind.GlobalServiceInfos) {
            stale?.services.delete(op.path);
            const old = this.services.get(op.path);
            if (old && sameBytes(old, op.bytes)) this.stats.unchanged++;
            else {
              events.push({ type: "upsert", object: decodeServiceInfo(op.bytes, op.path) });
              this.services.set(op.path, op.bytes);
              this.stats.decoded++;
            }
          } else if (op.set === SetKind.GlobalNodeInfos) {
            stale?.nodes.delete(op.path);
            const old = this.nodes.get(op.path);
            if (old && sameBytes(old, op.bytes)) this.stats.unchanged++;
            else {
              events.push({ type: "upsert", object: decodeNodeInfo(op.bytes, op.path) });
              this.nodes.set(op.path, op.bytes);
              this.stats.decoded++;
            }
          } else if (op.set === SetKind.GlobalEndpointInfos) {
            const id = sliceId(op.path);
            stale?.slices.get(id)?.delete(op.path);
            let slice = this.slices.get(id);
            const old = slice?.get(op.path);
            if (old && sameBytes(old.bytes, op.bytes)) this.stats.unchanged++;
            else {
              const decoded = decodeEndpointInfo(op.bytes, op.path);
              if (!slice) this.slices.set(id, (slice = new Map()));
              slice.set(op.path, { bytes: op.bytes, decoded });
              touched.add(id);
              this.stats.decoded++;
            }
          }
        } else if (op.op === "delete") {
          if (op.set === SetKind.GlobalServiceInfos) this.deleteService(op.path, events);
          else if (op.set === SetKind.GlobalNodeInfos) this.deleteNode(op.path, events);
          else if (op.set === SetKind.GlobalEndpointInfos) this.deleteEndpoint(op.path, touched);
        }
      } catch (err) {
        onBad(errorMessage(err));
      }
    }
    if (stale) {
      for (const p of stale.services) this.deleteService(p, events);
      for (const p of stale.nodes) this.deleteNode(p, events);
      for (const paths of stale.slices.values()) for (const p of paths) this.deleteEndpoint(p, touched);
    }
    // The brain's index knows a slice by namespace and name only: a slice that
    // moved to another service is deleted under the old one first, then set.
    const upserts: ClusterEvent[] = [];
    for (const id of touched) {
      const [ns, , name] = splitGlobalPath(id + "|");
      const slice = this.slices.get(id);
      if (!slice?.size) {
        this.slices.delete(id);
        events.push({ type: "delete", kind: "EndpointSlice", namespace: ns, name });
      } else upserts.push({ type: "upsert", object: sliceOf(name, [...slice.values()].map((e) => e.decoded)) });
    }
    events.push(...upserts);
    return events;
  }

  private allEndpointPaths(): Map<string, Set<string>> {
    const out = new Map<string, Set<string>>();
    for (const [id, s] of this.slices) out.set(id, new Set(s.keys()));
    return out;
  }

  private deleteService(path: string, events: ClusterEvent[]) {
    if (!this.services.delete(path)) return;
    const [namespace, name] = splitGlobalPath(path);
    events.push({ type: "delete", kind: "Service", namespace, name });
  }

  private deleteNode(path: string, events: ClusterEvent[]) {
    if (!this.nodes.delete(path)) return;
    events.push({ type: "delete", kind: "Node", namespace: "", name: splitGlobalPath(path)[1] });
  }

  private deleteEndpoint(path: string, touched: Set<string>) {
    const id = sliceId(path);
    if (this.slices.get(id)?.delete(path)) touched.add(id);
  }
}

/** `ns|svc|slice|key` -> `ns|svc|slice` */
const sliceId = (path: string) => path.slice(0, path.lastIndexOf("|"));
