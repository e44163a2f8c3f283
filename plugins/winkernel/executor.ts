// The real HNS client: the Host Compute Network API (computenetwork.dll)
// through bun:ffi, with JSON settings as microsoft/hcsshim's hcn package
// sends them. Loaded only on Windows, by a dynamic import in index.ts, and
// even then the DLL is opened on the first call, never at import time.
//
// Every HCN function returns an HRESULT and may hand back two CoTaskMem
// strings (a result and an error record); both are freed here.

import { FFIType, type Pointer, dlopen, read } from "bun:ffi";
import { KpngError } from "../../src/host/toolkit/index.ts";
import type { HcnLoadBalancer, HcnRemoteEndpoint, HnsClient, HnsEndpoint, HnsLoadBalancerInfo } from "./hns.ts";
import { guidBytes, hresultHex, wideString } from "./win32.ts";

const P = FFIType.ptr;
const I = FFIType.i32;

const hcnSymbols = {
  HcnEnumerateNetworks: { args: [P, P, P], returns: I },
  HcnOpenNetwork: { args: [P, P, P], returns: I },
  HcnCloseNetwork: { args: [P], returns: I },
  HcnEnumerateEndpoints: { args: [P, P, P], returns: I },
  HcnOpenEndpoint: { args: [P, P, P], returns: I },
  HcnQueryEndpointProperties: { args: [P, P, P, P], returns: I },
  HcnCloseEndpoint: { args: [P], returns: I },
  HcnCreateEndpoint: { args: [P, P, P, P, P], returns: I },
  HcnDeleteEndpoint: { args: [P, P], returns: I },
  HcnEnumerateLoadBalancers: { args: [P, P, P], returns: I },
  HcnOpenLoadBalancer: { args: [P, P, P], returns: I },
  HcnQueryLoadBalancerProperties: { args: [P, P, P, P], returns: I },
  HcnCloseLoadBalancer: { args: [P], returns: I },
  HcnCreateLoadBalancer: { args: [P, P, P, P], returns: I },
  HcnModifyLoadBalancer: { args: [P, P, P], returns: I },
  HcnDeleteLoadBalancer: { args: [P, P], returns: I },
} as const;

function openLibraries() {
  try {
    const hcn = dlopen("computenetwork.dll", hcnSymbols).symbols;
    const ole = dlopen("ole32.dll", { CoTaskMemFree: { args: [P], returns: FFIType.void } }).symbols;
    return { hcn, ole };
  } catch (err) {
    throw new KpngError(
      "unavailable",
      `winkernel: cannot load computenetwork.dll (is the Host Network Service installed?): ${String(err)}`,
    );
  }
}

type Libraries = ReturnType<typeof openLibraries>;

const query = (filter?: Record<string, string>) =>
  JSON.stringify({ SchemaVersion: { Major: 2, Minor: 0 }, Flags: 0, Filter: filter ? JSON.stringify(filter) : "" });
const zeroGuid = () => new Uint8Array(16);
const outPtr = () => new BigUint64Array(1);

const handleOf = (out: BigUint64Array) => Number(out[0]) as Pointer;

interface EndpointProps {
  ID: string;
  IpConfigurations?: { IpAddress: string }[];
  Flags?: number;
}

export function createHcnClient(networkName: string): HnsClient {
  return new HcnClient(networkName);
}

/** The DLLs are opened on the first call, the network's ID looked up on the first that needs it. */
class HcnClient implements HnsClient {
  private libs: Libraries | undefined;
  private networkId: string | undefined;

  constructor(private readonly networkName: string) {}

  async listEndpoints(): Promise<HnsEndpoint[]> {
    const out: HnsEndpoint[] = [];
    for (const id of this.enumerate("HcnEnumerateEndpoints", { VirtualNetwork: this.network() })) {
      const p = this.properties<EndpointProps>("Endpoint", id);
      const ip = p.IpConfigurations?.[0]?.IpAddress;
      if (ip) out.push({ id: p.ID, ip, remote: ((p.Flags ?? 0) & 1) === 1 });
    }
    return out;
  }

  async createEndpoint(settings: HcnRemoteEndpoint): Promise<string> {
    const net = outPtr();
    const err = outPtr();
    this.call("HcnOpenNetwork", [guidBytes(this.network()), net, err], err);
    try {
      const h = outPtr();
      this.call("HcnCreateEndpoint", [handleOf(net), zeroGuid(), wideString(JSON.stringify(settings)), h, err], err);
      const props = outPtr();
      try {
        this.call("HcnQueryEndpointProperties", [handleOf(h), wideString(query()), props, err], err);
      } finally {
        // closed on failure too: a sync that fails here is retried, and each try would hold one more handle
        this.lib().hcn.HcnCloseEndpoint(handleOf(h));
      }
      return (JSON.parse(this.takeString(props)) as EndpointProps).ID;
    } finally {
      this.lib().hcn.HcnCloseNetwork(handleOf(net));
    }
  }

  async deleteEndpoint(id: string): Promise<void> {
    const err = outPtr();
    this.call("HcnDeleteEndpoint", [guidBytes(id), err], err);
  }

  async listLoadBalancers(): Promise<HnsLoadBalancerInfo[]> {
    return this.enumerate("HcnEnumerateLoadBalancers").map((id) => {
      const settings = this.properties<HcnLoadBalancer & { ID: string }>("LoadBalancer", id);
      return { id: settings.ID ?? id, settings };
    });
  }

  async createLoadBalancer(settings: HcnLoadBalancer): Promise<string> {
    const h = outPtr();
    const err = outPtr();
    this.call("HcnCreateLoadBalancer", [zeroGuid(), wideString(JSON.stringify(settings)), h, err], err);
    try {
      const props = outPtr();
      this.call("HcnQueryLoadBalancerProperties", [handleOf(h), wideString(query()), props, err], err);
      return (JSON.parse(this.takeString(props)) as { ID: string }).ID;
    } finally {
      this.lib().hcn.HcnCloseLoadBalancer(handleOf(h));
    }
  }

  async updateLoadBalancer(id: string, settings: HcnLoadBalancer): Promise<void> {
    const h = outPtr();
    const err = outPtr();
    this.call("HcnOpenLoadBalancer", [guidBytes(id), h, err], err);
    try {
      this.call("HcnModifyLoadBalancer", [handleOf(h), wideString(JSON.stringify(settings)), err], err);
    } finally {
      this.lib().hcn.HcnCloseLoadBalancer(handleOf(h));
    }
  }

  async deleteLoadBalancer(id: string): Promise<void> {
    const err = outPtr();
    this.call("HcnDeleteLoadBalancer", [guidBytes(id), err], err);
  }

  private lib(): Libraries {
    return (this.libs ??= openLibraries());
  }

  /** Reads and frees a CoTaskMem PWSTR. */
  private takeString(out: BigUint64Array): string {
    const p = Number(out[0]) as Pointer;
    if (!p) return "";
    let s = "";
    for (let off = 0; ; off += 2) {
      const c = read.u16(p, off);
      if (c === 0) break;
      s += String.fromCharCode(c);
    }
    this.lib().ole.CoTaskMemFree(p);
    return s;
  }

  /** Runs one HCN function; a failed HRESULT becomes a one-line KpngError with HNS's error record. */
  private call(fn: keyof typeof hcnSymbols, args: unknown[], errOut: BigUint64Array) {
    const f = this.lib().hcn[fn] as (...a: unknown[]) => number;
    const hr = f(...args);
    const record = this.takeString(errOut);
    if (hr < 0)
      throw new KpngError("internal", `winkernel: ${fn} failed with ${hresultHex(hr)}${record ? `: ${record.replace(/\s+/g, " ")}` : ""}`);
  }

  private enumerate(
    fn: "HcnEnumerateNetworks" | "HcnEnumerateEndpoints" | "HcnEnumerateLoadBalancers",
    filter?: Record<string, string>,
  ): string[] {
    const out = outPtr();
    const err = outPtr();
    this.call(fn, [wideString(query(filter)), out, err], err);
    const text = this.takeString(out);
    return text ? (JSON.parse(text) as string[]) : [];
  }

  private properties<T>(kind: "Endpoint" | "LoadBalancer", id: string): T {
    const h = outPtr();
    const err = outPtr();
    this.call(`HcnOpen${kind}`, [guidBytes(id), h, err], err);
    try {
      const props = outPtr();
      this.call(`HcnQuery${kind}Properties`, [handleOf(h), wideString(query()), props, err], err);
      return JSON.parse(this.takeString(props)) as T;
    } finally {
      this.lib().hcn[`HcnClose${kind}`](handleOf(h));
    }
  }

  private network(): string {
    if (this.networkId) return this.networkId;
    if (!this.networkName) throw new KpngError("invalid_argument", "config winkernel.networkName: must name the HNS network of the pods");
    const [id] = this.enumerate("HcnEnumerateNetworks", { Name: this.networkName });
    if (!id) throw new KpngError("unavailable", `winkernel: HNS network "${this.networkName}" not found`);
    return (this.networkId = id);
  }
}
