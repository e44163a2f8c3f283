// What a source says about the objects it reads: an object it refused, or a
// value it read with a warning (skipped, or unknown to this version), is one
// WARN line naming the object, the field and the value, said once: not again
// at every relist, watch event or re-read of the file that brings the same
// object back unchanged. A refused object is counted every time
// (kpng_objects_dropped_total).

import { objectName, type K8sObject, type Kind, type Note, type ParseResult } from "../brain/k8s/objects.ts";
import type { Logger } from "../log.ts";
import type { Ingest } from "./ingest.ts";

/** `service default/web spec.loadBalancerSourceRanges[1]: "x" is not a CIDR: skipped` */
export const noteLine = (obj: K8sObject, n: Note) => `${objectName(obj)} ${n.field}: ${n.message}`;

export class ReadLog {
  /** object id -> what was last said about it (objects read without a word are not kept) */
  private readonly said = new Map<string, string>();

  constructor(
    private readonly log: Logger,
    private readonly ingest: Pick<Ingest, "dropped">,
  ) {}

  /** nothing said about any object held: a clean read needs no report */
  get quiet(): boolean {
    return this.said.size === 0;
  }

  /** The outcome of reading object `id` of `kind`. */
  report(kind: Kind, id: string, res: ParseResult): void {
    if (!res.ok && "error" in res) this.ingest.dropped(kind, res.reason);
    const lines = res.ok ? (res.notes?.map((n) => noteLine(res.object, n)) ?? []) : "error" in res ? [res.error] : [];
    const text = lines.join("\n");
    if ((this.said.get(id) ?? "") === text) return;
    if (text) this.said.set(id, text);
    else this.said.delete(id);
    if (res.ok) for (const line of lines) this.log.warn("read as kube-proxy reads it", { warning: line });
    else for (const line of lines) this.log.warn("skipping invalid object, keeping its last valid version", { error: line });
  }

  /** The object is gone: if it comes back, what is wrong with it is said again. */
  forget(id: string): void {
    this.said.delete(id);
  }
}
