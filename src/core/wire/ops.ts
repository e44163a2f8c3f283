// The ops a stream carries, as both ends and the global model see them. A
// leaf room of its own (it imports only the generated messages): the API
// server writes these ops, the client library reads them, and the global
// model and mirror (core/global/) keep them, so none of those rooms has to
// import another to name them.

import type { Set as SetKind } from "../../gen/localv1/services_pb.ts";

export type WireOp =
  | { op: "set"; set: SetKind; path: string; bytes: Uint8Array }
  | { op: "delete"; set: SetKind; path: string }
  | { op: "sync" }
  | { op: "reset" };

/** A change set from `Sets.Watch`: the Set/Delete ops up to a Sync, and whether the stream began with Reset. */
export interface ChangeSet {
  reset: boolean;
  /** Set and Delete ops, in order */
  ops: WireOp[];
}

/** Whether two marshalled messages are the same bytes (the same array, or equal contents). */
export const sameBytes = (a: Uint8Array, b: Uint8Array) => a === b || Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(b);
