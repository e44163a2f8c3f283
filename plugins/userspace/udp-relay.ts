// One UDP frontend: a socket on the frontend's address, and per client
// (address and port) a flow: a socket of its own towards the chosen
// endpoint, whose answers go back to the client from the frontend socket,
// so the client sees them come from the address it sent to. A flow lives
// while packets keep coming (the idle timeout plays conntrack's UDP timeout)
// and ends when its endpoint is removed; the client's next packet then picks
// again, as after upstream's conntrack cleanup.
//
// node:dgram (Bun implements it on its native UDP sockets): one API for
// both families, with the peer of each datagram.

import dgram from "node:dgram";
import { splitHostPort } from "../../src/host/toolkit/index.ts";
import type { Frontend } from "./frontends.ts";
import { FrontendChoice } from "./picker.ts";
import { isNodeAddress, plainAddress, type RelayOptions } from "./tcp-relay.ts";

export interface UdpRelayOptions extends RelayOptions {
  /** a flow without packets this long is forgotten */
  idleMs?: number;
}

interface Flow {
  endpoint: string;
  socket: dgram.Socket;
  timer: ReturnType<typeof setTimeout>;
}

export class UdpRelay {
  private readonly socket: dgram.Socket;
  private readonly choice: FrontendChoice;
  private readonly flows = new Map<string, Flow>();
  private readonly now: () => number;
  private closed = false;

  constructor(
    private frontend: Frontend,
    private readonly opts: UdpRelayOptions,
  ) {
    this.now = opts.now ?? Date.now;
    this.choice = new FrontendChoice(frontend);
    this.socket = dgram.createSocket({ type: frontend.family === "v6" ? "udp6" : "udp4", ipv6Only: frontend.family === "v6" });
    this.socket.on("message", (msg, from) => this.fromClient(msg, plainAddress(from.address), from.port));
    this.socket.on("error", (err) => {
      if (!this.closed) opts.log.warn("udp frontend error", { frontend: frontend.key, err: err.message });
    });
  }

  listen(): Promise<number> {
    const at = this.opts.listen ?? { host: this.frontend.ip, port: this.frontend.port };
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => {
        this.closed = true;
        this.socket.close(); // the descriptor goes with the failed bind; the backend tries a new relay next sync
        reject(err);
      };
      this.socket.once("error", onError);
      this.socket.bind({ address: at.host, port: at.port, exclusive: true }, () => {
        this.socket.off("error", onError);
        resolve(this.socket.address().port);
      });
    });
  }

  update(frontend: Frontend): void {
    this.frontend = frontend;
    this.choice.update(frontend);
    for (const [client, flow] of this.flows) if (!this.choice.has(flow.endpoint)) this.end(client, flow);
  }

  get connections(): number {
    return this.flows.size;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const [client, flow] of this.flows) this.end(client, flow);
    await new Promise<void>((resolve) => this.socket.close(() => resolve()));
  }

  private fromClient(msg: Buffer, address: string, port: number) {
    if (this.closed) return;
    // loadBalancerSourceRanges: dropped, as the kernel backends do
    if (!this.choice.admits(address)) return;
    const client = `${address}|${port}`;
    let flow = this.flows.get(client);
    if (!flow) {
      const endpoint = this.choice.pick(address, this.isLocal(address), this.now());
      if (endpoint === undefined) return;
      flow = this.open(client, endpoint, address, port);
    }
    this.touch(client, flow);
    const { ip: host, port: ep } = splitHostPort(flow.endpoint)!;
    flow.socket.send(msg, ep, host);
  }

  /** this node's own datagrams come from one of its addresses; the frontend's own address stands for them (a UDP socket does not see the destination) */
  private isLocal(address: string): boolean {
    return address === this.frontend.ip || isNodeAddress(address, this.opts.nodeIPs);
  }

  private open(client: string, endpoint: string, address: string, port: number): Flow {
    const { ip: host, port: ep } = splitHostPort(endpoint)!;
    const socket = dgram.createSocket({ type: this.frontend.family === "v6" ? "udp6" : "udp4" });
    socket.on("message", (answer, from) => {
      // only the endpoint's answers; anything else reaching this port is not part of the flow
      if (from.port !== ep || plainAddress(from.address) !== host) return;
      const flow = this.flows.get(client);
      if (flow) this.touch(client, flow);
      this.socket.send(answer, port, address);
    });
    socket.on("error", () => {}); // an ICMP error from the endpoint: the client's own timeout decides
    const flow: Flow = { endpoint, socket, timer: setTimeout(() => {}, 0) };
    this.flows.set(client, flow);
    return flow;
  }

  private touch(client: string, flow: Flow) {
    clearTimeout(flow.timer);
    flow.timer = setTimeout(() => this.end(client, flow), this.opts.idleMs ?? 30_000);
  }

  private end(client: string, flow: Flow) {
    clearTimeout(flow.timer);
    if (this.flows.get(client) === flow) this.flows.delete(client);
    try {
      flow.socket.close();
    } catch {
      // already closed
    }
  }
}
