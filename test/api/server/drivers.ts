// The same RPCs through both server paths: Connect's handler (in memory,
// Connect's router transport) and the fast gRPC path (a real unix socket,
// kpng's own gRPC client). API semantics tests run against both.

import { create } from "@bufbuild/protobuf";
import { createClient, createRouterTransport, type ConnectError } from "@connectrpc/connect";
import type { Brain } from "../../../src/core/brain/brain.ts";
import { connectGrpc } from "../../../src/core/api/client/grpc.ts";
import { nextSnapshot, watchChangeSets, type Snapshot } from "../../../src/core/api/client/streams.ts";
import type { ChangeSet } from "../../../src/core/wire/ops.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import { createApi, startApiServer } from "../../../src/core/api/server/index.ts";
import type { WireOp } from "../../../src/core/wire/ops.ts";
import { Endpoints, NextFilterSchema, Sets, WatchReqSchema, type WatchReq } from "../../../src/gen/localv1/services_pb.ts";
import { tempDir } from "../../harness/kpng-process.ts";

export interface WatchHandle {
  /** asks for the next change set (sends a WatchReq) and reads it up to Sync */
  next(nodeName?: string): Promise<ChangeSet>;
  close(): void;
}

export interface Driver {
  readonly name: string;
  watch(nodeName: string): WatchHandle;
  next(filter: { instanceID: bigint; rev: bigint; nodeName: string }, signal?: AbortSignal): Promise<Snapshot>;
  readonly instanceID: bigint;
  close(): Promise<void>;
}

/** Connect's handler, in memory. */
export function connectDriver(brain: Brain, defaultNodeName = "node-1"): Driver {
  const api = createApi({ brain, defaultNodeName, log: memoryLogger() });
  const transport = createRouterTransport(api.routes);
  return {
    name: "connect (in memory)",
    instanceID: api.instanceID,
    watch(nodeName) {
      const ac = new AbortController();
      const asks = new Queue<WatchReq>();
      const it = createClient(Sets, transport).watch(asks, { signal: ac.signal })[Symbol.asyncIterator]();
      let first = true;
      return {
        async next(name = nodeName) {
          asks.push(create(WatchReqSchema, { NodeName: name }));
          const cs: ChangeSet = { reset: false, ops: [] };
          for (;;) {
            const r = await it.next();
            if (r.done) throw new Error("stream ended");
            const op = r.value.Op;
            if (op.case === "Reset") cs.reset ||= first;
            else if (op.case === "Set") cs.ops.push({ op: "set", set: op.value.Ref!.Set, path: op.value.Ref!.Path, bytes: op.value.Bytes });
            else if (op.case === "Delete") cs.ops.push({ op: "delete", set: op.value.Set, path: op.value.Path });
            else if (op.case === "Sync") {
              first = false;
              return cs;
            }
          }
        },
        close: () => ac.abort(),
      };
    },
    async next(filter, signal) {
      const items = createClient(Endpoints, transport).next(
        create(NextFilterSchema, { InstanceID: filter.instanceID, Rev: filter.rev, NodeName: filter.nodeName }),
        { signal },
      );
      let head: { instanceID: bigint; rev: bigint } | undefined;
      const entries: Snapshot["entries"] = [];
      for await (const item of items) {
        if (item.Next) head = { instanceID: item.Next.InstanceID, rev: item.Next.Rev };
        const se = item.Endpoints;
        if (se?.Service)
          entries.push([
            `${se.Service.Namespace}/${se.Service.Name}`,
            { service: se.Service, endpoints: se.Endpoints.map((e, i) => [se.EndpointKeys[i], e]) },
          ]);
      }
      return { ...head!, entries };
    },
    close: async () => {},
  };
}

/** The fast gRPC path over a real unix socket, with kpng's client. */
export async function grpcDriver(brain: Brain, defaultNodeName = "node-1"): Promise<Driver> {
  const dir = tempDir();
  dir.create();
  const path = `${dir.path}/api.sock`;
  const server = await startApiServer({ brain, listen: [`unix://${path}`], defaultNodeName, log: memoryLogger() });
  const conns: Array<{ close(): void }> = [];
  return {
    name: "grpc (unix socket)",
    instanceID: server.instanceID,
    watch(nodeName) {
      const conn = connectGrpc({ kind: "unix", path });
      conns.push(conn);
      const ac = new AbortController();
      // watchChangeSets sends the next WatchReq when asked for the next change set.
      const it = watchChangeSets(conn, nodeName, ac.signal)[Symbol.asyncIterator]();
      return {
        async next() {
          const r = await it.next();
          if (r.done) throw new Error("stream ended");
          return r.value;
        },
        close: () => {
          ac.abort();
          conn.close();
        },
      };
    },
    async next(filter, signal) {
      const conn = connectGrpc({ kind: "unix", path });
      try {
        return await nextSnapshot(conn, filter, signal ?? new AbortController().signal);
      } finally {
        conn.close();
      }
    },
    async close() {
      for (const c of conns) c.close();
      await server.close();
      dir.remove();
    },
  };
}

export const setPaths = (cs: ChangeSet, set: number) =>
  cs.ops.filter((o): o is Extract<WireOp, { op: "set" }> => o.op === "set" && o.set === set).map((o) => o.path);
export const codeOf = (err: unknown) => (err as ConnectError).code;

class Queue<T> implements AsyncIterable<T> {
  private items: T[] = [];
  private wake: (() => void) | null = null;
  push(v: T) {
    this.items.push(v);
    this.wake?.();
  }
  async *[Symbol.asyncIterator]() {
    for (;;) {
      while (this.items.length) yield this.items.shift()!;
      await new Promise<void>((r) => (this.wake = r));
    }
  }
}
