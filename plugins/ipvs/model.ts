// The IPVS backend's data: what one service asks of the kernel, and the
// operations that move the kernel from one picture to another. Keys are
// strings so every collection is a plain Map/Set and diffs are cheap.

import { hostPort, type ProtocolName } from "../../src/host/toolkit/index.ts";

export type Proto = ProtocolName;

export interface VirtualServer {
  proto: Proto;
  ip: string;
  port: number;
  scheduler: string;
  /** ClientIP affinity: persistence timeout in seconds (absent = none) */
  persistence?: number;
}

export interface RealServer {
  ip: string;
  port: number;
  /** 1 = in service, 0 = draining (graceful removal) */
  weight: number;
}

/** One virtual server with its real servers, keyed by rsKey. */
export interface VirtualService {
  vs: VirtualServer;
  reals: Map<string, RealServer>;
}

/** Everything one service contributes to the kernel. */
export interface ServiceModel {
  virtualServices: Map<string, VirtualService>;
  /** service IPs bound to the dummy interface */
  addresses: Set<string>;
  /** ipset entries as `SETNAME ENTRY` */
  entries: Set<string>;
}

/** The kernel as kpng sees it (observed at a full sync, then kept up to date). */
export interface KernelModel {
  virtualServices: Map<string, VirtualService>;
  addresses: Set<string>;
  entries: Set<string>;
}

export const emptyKernel = (): KernelModel => ({ virtualServices: new Map(), addresses: new Set(), entries: new Set() });

export const vsKey = (vs: Pick<VirtualServer, "proto" | "ip" | "port">) => `${vs.proto} ${hostPort(vs.ip, vs.port)}`;
export const rsKey = (rs: Pick<RealServer, "ip" | "port">) => hostPort(rs.ip, rs.port);

export const entryKey = (set: string, entry: string) => `${set} ${entry}`;

/** Graceful termination only makes sense where connections end: UDP and SCTP reals go at once (upstream does the same). */
export const drainsGracefully = (proto: Proto) => proto === "tcp";

// ---- operations ----

export type IpvsOp =
  | { op: "add-service"; vs: VirtualServer }
  | { op: "edit-service"; vs: VirtualServer }
  | { op: "delete-service"; vs: VirtualServer }
  | { op: "add-real"; vs: VirtualServer; rs: RealServer }
  | { op: "edit-real"; vs: VirtualServer; rs: RealServer }
  | { op: "delete-real"; vs: VirtualServer; rs: RealServer };

export type SetOp = { op: "add" | "del"; set: string; entry: string };
export type AddressOp = { op: "add" | "del"; ip: string };

/** One sync's worth of kernel changes, printed by print.ts into one command each. */
export interface Transaction {
  sets: SetOp[];
  ipvs: IpvsOp[];
  addresses: AddressOp[];
}

export const emptyTransaction = (): Transaction => ({ sets: [], ipvs: [], addresses: [] });

export const operationCount = (tx: Transaction) => tx.sets.length + tx.ipvs.length + tx.addresses.length;
