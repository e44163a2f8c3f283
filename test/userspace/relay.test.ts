// The relays alone, on 127.0.0.1 in this process: every byte arrives, in
// order, through a slow reader (the backpressure path), a FIN is passed on
// while the answer still flows back (half-close), a refusing endpoint is
// skipped for the next one, and UDP flows keep their endpoint.

import { afterEach, describe, expect, test } from "bun:test";
import { createHash } from "node:crypto";
import dgram from "node:dgram";
import net from "node:net";
import { memoryLogger } from "../../src/core/log.ts";
import type { Frontend } from "../../plugins/userspace/frontends.ts";
import { TcpRelay } from "../../plugins/userspace/tcp-relay.ts";
import { UdpRelay } from "../../plugins/userspace/udp-relay.ts";
import { createUserspaceBackend } from "../../plugins/userspace/index.ts";
import { context, ep, entry, nodeConfig, nodeState, recorder, svc } from "../nft/fixtures.ts";

const cleanups: Array<() => unknown> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0)) await c();
});

const frontend = (proto: "tcp" | "udp", endpoints: string[]): Frontend => ({
  key: `${proto}/127.0.0.1/0`,
  proto,
  family: "v4",
  ip: "127.0.0.1",
  port: 0,
  kind: "cluster",
  service: "default/t:p",
  endpoints,
});

/** a server that reads slowly, hashes what it got, and answers "<bytes> <sha256>" after the client's FIN */
async function slowSink(): Promise<number> {
  const server = net.createServer({ allowHalfOpen: true }, (c) => {
    const h = createHash("sha256");
    let n = 0;
    c.on("data", (d) => {
      h.update(d);
      n += d.length;
      // a slow reader: the relay's writes towards it come back partial
      c.pause();
      setTimeout(() => c.resume(), 2);
    });
    c.on("end", () => c.end(`${n} ${h.digest("hex")}\n`));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => server.close());
  return (server.address() as net.AddressInfo).port;
}

/** sends `data` to 127.0.0.1:port, then FIN; resolves with what came back before the server's FIN */
function exchange(port: number, data: string | Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const c = net.connect({ host: "127.0.0.1", port, allowHalfOpen: true });
    let answer = "";
    c.on("data", (d) => (answer += d.toString()));
    c.on("error", reject);
    c.on("end", () => resolve(answer.trim()));
    c.end(data);
  });
}

async function startTcp(endpoints: string[]): Promise<{ relay: TcpRelay; port: number }> {
  const relay = new TcpRelay(frontend("tcp", endpoints), { log: memoryLogger(), connectTimeoutMs: 2000 });
  const port = await relay.listen();
  cleanups.push(() => relay.close());
  return { relay, port };
}

describe("TCP relay", () => {
  test("32 MiB through a slow reader: every byte, in order; the FIN reaches the server and its answer comes back", async () => {
    const sink = await slowSink();
    const { port } = await startTcp([`127.0.0.1:${sink}`]);
    const data = Buffer.alloc(32 * 1024 * 1024);
    for (let i = 0; i < data.length; i += 4) data.writeUInt32LE(i, i);
    const want = `${data.length} ${createHash("sha256").update(data).digest("hex")}`;
    const got = await exchange(port, data);
    expect(got).toBe(want);
  }, 60_000);

  test("a refusing endpoint is skipped: the connection goes to the next one", async () => {
    const sink = await slowSink();
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, "127.0.0.1", r));
    const dead = (closed.address() as net.AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const { port } = await startTcp([`127.0.0.1:${dead}`, `127.0.0.1:${sink}`]);
    const got = await exchange(port, "hi");
    expect(got.split(" ")[0]).toBe("2");
  });

  test("no endpoint takes it: the client is reset", async () => {
    const { port } = await startTcp(["127.0.0.1:1"]);
    const err = await new Promise<string>((resolve) => {
      const c = net.connect({ host: "127.0.0.1", port });
      c.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
      c.on("close", () => resolve("closed"));
    });
    expect(err).toBe("ECONNRESET");
  });
});

describe("UDP relay", () => {
  test("a flow keeps its endpoint; answers come back from the frontend's address", async () => {
    const servers = await Promise.all(
      ["a", "b"].map(async (name) => {
        const s = dgram.createSocket("udp4");
        s.on("message", (m, from) => s.send(`${name} ${m}`, from.port, from.address));
        await new Promise<void>((r) => s.bind(0, "127.0.0.1", r));
        cleanups.push(() => s.close());
        return `127.0.0.1:${s.address().port}`;
      }),
    );
    const relay = new UdpRelay(frontend("udp", servers), { log: memoryLogger() });
    const port = await relay.listen();
    cleanups.push(() => relay.close());
    const client = dgram.createSocket("udp4");
    cleanups.push(() => client.close());
    const answers: string[] = [];
    const froms = new Set<string>();
    client.on("message", (m, from) => {
      answers.push(m.toString());
      froms.add(`${from.address}:${from.port}`);
    });
    await new Promise<void>((r) => client.bind(0, "127.0.0.1", r));
    for (let i = 0; i < 3; i++) client.send(`m${i}`, port, "127.0.0.1");
    const deadline = Date.now() + 30_000; // against a hang only: a loaded machine takes seconds
    while (answers.length < 3 && Date.now() < deadline) await Bun.sleep(10);
    expect(answers).toEqual(["a m0", "a m1", "a m2"]);
    expect([...froms]).toEqual([`127.0.0.1:${port}`]);
    expect(relay.connections).toBe(1);
    // the endpoint leaves: the flow ends, the next packet picks the other
    relay.update(frontend("udp", [servers[1]!]));
    expect(relay.connections).toBe(0);
    client.send("m3", port, "127.0.0.1");
    while (answers.length < 4 && Date.now() < deadline) await Bun.sleep(10);
    expect(answers[3]).toBe("b m3");
  });
});

describe("the backend", () => {
  test("a port another process holds: that frontend is logged and left out, the others serve", async () => {
    const sink = await slowSink();
    const squatter = net.createServer();
    await new Promise<void>((r) => squatter.listen(0, "127.0.0.1", r));
    cleanups.push(() => squatter.close());
    const taken = (squatter.address() as net.AddressInfo).port;
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
    const free = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));

    const ctx = context(nodeConfig({ nodeIPs: [] }));
    const { exec } = recorder(); // `ip` recorded: 127.0.0.1 is already the node's
    const b = createUserspaceBackend(ctx, { exec });
    cleanups.push(() => b.close());
    const service = (name: string, port: number) =>
      entry(svc({ name, clusterIPs: ["127.0.0.1"], ports: [{ name: "p", port, targetPort: sink }] }), { a: ep({ ips: ["127.0.0.1"] }) });
    await b.apply(nodeState([service("taken", taken), service("free", free)]), null);
    expect(ctx.lines.filter((l) => l.includes("cannot listen"))).toHaveLength(1);
    expect(ctx.lines.find((l) => l.includes("cannot listen"))).toContain(`tcp/127.0.0.1/${taken}`);
    const got = await exchange(free, "hello");
    expect(got.split(" ")[0]).toBe("5");
    expect([...b.connections().keys()]).toEqual([`tcp/127.0.0.1/${free}`]);
  });
});

describe("UDP relay bind failure", () => {
  test("an address:port another socket holds: listen() rejects", async () => {
    const holder = dgram.createSocket("udp4");
    await new Promise<void>((r) => holder.bind(0, "127.0.0.1", r));
    cleanups.push(() => holder.close());
    const relay = new UdpRelay({ ...frontend("udp", ["127.0.0.1:9"]), port: holder.address().port }, { log: memoryLogger() });
    await expect(relay.listen()).rejects.toThrow();
  });
});
