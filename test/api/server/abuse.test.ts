// What a brain's TCP port gets from broken or hostile clients: garbage
// bytes, malformed HTTP/2 frames, gRPC and Connect messages that are not
// ours or too big, a TLS port spoken to in plaintext, and a consumer that
// stops reading. Each gets an error; the brain keeps serving everyone else.

import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import * as http2 from "node:http2";
import * as net from "node:net";
import { join } from "node:path";
import { connectGrpc, GrpcError, type ConnectOptions } from "../../../src/core/api/client/grpc.ts";
import { nextSnapshot } from "../../../src/core/api/client/streams.ts";
import { MAX_REQUEST_MESSAGE } from "../../../src/core/api/server/grpc-fast.ts";
import { startApiServer, type ApiServer } from "../../../src/core/api/server/index.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import { makeTestCert, type TestCert } from "../../harness/api-server.ts";
import { waitFor } from "../../sources/kube/helpers.ts";
import { brainWith, serviceObjects, upsert } from "../brain-fixture.ts";
import { LOADED_WAIT_MS, tempDir } from "../../harness/kpng-process.ts";
import { FLAG, FRAME, frame, grpcMessage, grpcRequestHeaders, headerBlock, PREFACE, rawH2 } from "./raw-h2.ts";

// waits are bounded by their condition, up to LOADED_WAIT_MS each (issue 38: no test may depend
// on an idle machine): a test's own timeout leaves room for two
setDefaultTimeout(150_000);
const dir = tempDir("kpng-abuse-");
const log = memoryLogger();
const STUCK_MS = 300;
const HANDSHAKE_MS = 1000;
let plain: ApiServer;
let secure: ApiServer;
let cert: TestCert;
const portOf = (s: ApiServer) => (s.addresses[0] as { port: number }).port;

beforeAll(async () => {
  dir.create();
  cert = makeTestCert(dir.path);
  // A whole model of ~0.5 MB: more than a stuck client's flow-control window takes.
  const brain = brainWith({ services: 400, endpoints: 10, nodes: 3 });
  const common = { brain, listen: ["tcp://127.0.0.1:0"], defaultNodeName: "node-1", log, stuckMs: STUCK_MS, handshakeMs: HANDSHAKE_MS };
  plain = await startApiServer(common);
  secure = await startApiServer({ ...common, tls: { files: { crt: join(dir.path, "server.crt"), key: join(dir.path, "server.key") } } });
});
afterAll(async () => {
  await plain?.close();
  await secure?.close();
  dir.remove();
});

/** The brain still answers a well-formed Next, on both ports. */
async function stillServing() {
  for (const [server, opts] of [
    [plain, {}],
    [secure, { tls: { ca: cert.cert } }],
  ] as Array<[ApiServer, ConnectOptions]>) {
    const conn = connectGrpc({ kind: "tcp", host: "127.0.0.1", port: portOf(server) }, opts);
    try {
      const snap = await nextSnapshot(conn, { instanceID: 0n, rev: 0n, nodeName: "node-1" }, AbortSignal.timeout(10_000));
      expect(snap.entries.length).toBe(400);
    } finally {
      conn.close();
    }
  }
}

/** Resolves when the server has closed the connection (true) or after `ms` (false). */
function closedWithin(sock: net.Socket, ms = 5000): Promise<boolean> {
  return new Promise((resolve) => {
    if (sock.destroyed) return resolve(true);
    const t = setTimeout(() => resolve(false), ms);
    sock.once("close", () => {
      clearTimeout(t);
      resolve(true);
    });
  });
}

describe("malformed HTTP/2: the connection gets GOAWAY or is closed", () => {
  const cases: Array<{ name: string; bytes: () => Buffer }> = [
    { name: "random bytes instead of a request", bytes: () => Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7919) % 256)) },
    { name: "a frame longer than the maximum frame size", bytes: () => frame(FRAME.DATA, 0, 1, Buffer.alloc(16), 1 << 23) },
    {
      name: "HEADERS on stream 0",
      bytes: () => frame(FRAME.HEADERS, FLAG.END_HEADERS, 0, headerBlock(grpcRequestHeaders("/localv1.Endpoints/Next"))),
    },
    {
      name: "a HEADERS block HPACK cannot decode",
      bytes: () => frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, Buffer.from([0xff, 0xff, 0xff, 0xff, 0xff, 0x7f])),
    },
    { name: "DATA on a stream never opened", bytes: () => frame(FRAME.DATA, 0, 7, grpcMessage(Buffer.alloc(3))) },
    { name: "a SETTINGS frame of the wrong length", bytes: () => frame(FRAME.SETTINGS, 0, 0, Buffer.alloc(5)) },
    { name: "WINDOW_UPDATE overflowing the window", bytes: () => frame(FRAME.WINDOW_UPDATE, 0, 0, Buffer.from([0x7f, 0xff, 0xff, 0xff])) },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const conn = await rawH2(portOf(plain), { preface: !c.name.startsWith("random") });
      conn.write(c.bytes());
      const answered = await conn.until((f) => f.type === FRAME.GOAWAY || f.type === FRAME.RST_STREAM);
      expect(answered || conn.closed).toBe(true);
      conn.close();
      await stillServing();
    });
  }

  test("a header list over the limit (16 KiB): refused", async () => {
    const s = http2.connect(`http://127.0.0.1:${portOf(plain)}`);
    s.on("error", () => {});
    const req = s.request({ ...grpcRequestHeaders("/localv1.Endpoints/Next"), "x-pad": "a".repeat(40_000) });
    const outcome = await new Promise<string>((resolve) => {
      req.on("response", (h) => resolve(`status ${h[":status"]}`));
      req.on("error", (e) => resolve(`error ${e.message}`));
      req.on("close", () => resolve(`closed ${req.rstCode}`));
    });
    expect(outcome).not.toBe("status 200");
    s.destroy();
    await stillServing();
  });
});

/** One raw gRPC call with Bun's HTTP/2 client: the request body as given, the grpc-status and message it ends with. */
async function grpcCall(path: string, body: Buffer): Promise<{ status: string; message: string }> {
  const s = http2.connect(`http://127.0.0.1:${portOf(plain)}`);
  s.on("error", () => {});
  try {
    const req = s.request({ ":method": "POST", ":path": path, "content-type": "application/grpc", te: "trailers" });
    let status = "";
    let message = "";
    const take = (h: http2.IncomingHttpHeaders) => {
      if (h[":status"] !== undefined && Number(h[":status"]) !== 200) status = `http ${h[":status"]}`;
      if (h["grpc-status"] !== undefined)
        [status, message] = [String(h["grpc-status"]), decodeURIComponent(String(h["grpc-message"] ?? ""))];
    };
    req.on("response", take);
    req.on("trailers", take);
    req.on("data", () => {});
    req.end(body);
    await new Promise<void>((resolve) => {
      req.on("close", () => resolve());
      req.on("error", () => resolve());
    });
    return { status, message };
  } finally {
    s.destroy();
  }
}

describe("malformed gRPC messages: an error status, the brain keeps serving", () => {
  const cases: Array<{ name: string; path: string; body: () => Buffer; status: string; message: RegExp }> = [
    {
      name: "a message that is not a NextFilter",
      path: "/localv1.Endpoints/Next",
      body: () => grpcMessage(Buffer.from([0xff, 0xff, 0xff, 0xff, 0x0f])),
      status: "3",
      message: /cannot decode localv1.NextFilter/,
    },
    {
      name: "a WatchReq without a node name",
      path: "/localv1.Sets/Watch",
      body: () => grpcMessage(Buffer.alloc(0)),
      status: "3",
      message: /WatchReq.NodeName: must not be empty/,
    },
    {
      name: `an envelope declaring more than ${MAX_REQUEST_MESSAGE} bytes`,
      path: "/localv1.Sets/Watch",
      body: () => grpcMessage(Buffer.alloc(10), 2 * MAX_REQUEST_MESSAGE),
      status: "8",
      message: /exceeds 1048576/,
    },
    {
      name: "an envelope cut short",
      path: "/localv1.Endpoints/Next",
      body: () => grpcMessage(Buffer.alloc(10), 100),
      status: "3",
      message: /incomplete envelope/,
    },
    {
      name: "a compressed message",
      path: "/localv1.Endpoints/Next",
      body: () => Buffer.concat([Buffer.from([1, 0, 0, 0, 1]), Buffer.alloc(1)]),
      status: "12",
      message: /compressed/,
    },
    // Connect's router answers HTTP 404, which gRPC clients read as UNIMPLEMENTED
    { name: "an unknown method", path: "/localv1.Sets/Nope", body: () => grpcMessage(Buffer.alloc(0)), status: "http 404", message: /^$/ },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const r = await grpcCall(c.path, c.body());
      expect(r.status).toBe(c.status);
      expect(r.message).toMatch(c.message);
      await stillServing();
    });
  }
});

describe("malformed Connect requests (HTTP/1.1): an error, the brain keeps serving", () => {
  const url = (path: string) => `http://127.0.0.1:${portOf(plain)}${path}`;
  const envelope = (json: string, declared?: number) => {
    const b = Buffer.from(json);
    const head = Buffer.from([0, 0, 0, 0, 0]);
    head.writeUInt32BE(declared ?? b.length, 1);
    return Buffer.concat([head, b]);
  };
  const cases: Array<{ name: string; body: () => Buffer; want: RegExp }> = [
    { name: "JSON that does not parse", body: () => envelope("{not json"), want: /invalid_argument|internal/ },
    { name: "a field of the wrong type", body: () => envelope('{"NodeName": {"a": 1}}'), want: /invalid_argument/ },
    {
      name: `a message over ${MAX_REQUEST_MESSAGE} bytes`,
      body: () => envelope(`{"NodeName":"${"n".repeat(MAX_REQUEST_MESSAGE + 10)}"}`),
      want: /resource_exhausted/,
    },
  ];
  for (const c of cases) {
    test(c.name, async () => {
      const res = await fetch(url("/localv1.Endpoints/Next"), {
        method: "POST",
        headers: { "content-type": "application/connect+json" },
        body: c.body(),
      });
      const text = await res.text();
      expect(`${res.status} ${text}`).toMatch(c.want);
      await stillServing();
    });
  }

  test("an HTTP/1.1 request line that is not one", async () => {
    const sock = net.connect(portOf(plain), "127.0.0.1");
    sock.on("error", () => {});
    let got = "";
    sock.on("data", (d) => (got += d.toString()));
    sock.write("\x00\x01 NOT HTTP AT ALL\r\n\r\n");
    expect(await closedWithin(sock)).toBe(true);
    expect(got === "" || got.startsWith("HTTP/1.1 400")).toBe(true);
    await stillServing();
  });
});

describe(`a connection that has not shown its protocol within ${HANDSHAKE_MS} ms is closed`, () => {
  test.each([
    ["nothing", Buffer.alloc(0)],
    ["half the HTTP/2 preface", PREFACE.subarray(0, 10)],
  ])("the plaintext port, a client that sends %s", async (_what, bytes) => {
    const sock = net.connect(portOf(plain), "127.0.0.1");
    sock.on("error", () => {});
    await new Promise((r) => sock.once("connect", r));
    if (bytes.length) sock.write(bytes);
    const t0 = performance.now();
    expect(await closedWithin(sock, 15_000)).toBe(true);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(HANDSHAKE_MS * 0.9);
    await stillServing();
  });

  test("the TLS port, a client that connects and never starts its handshake", async () => {
    const sock = net.connect(portOf(secure), "127.0.0.1");
    sock.on("error", () => {});
    await new Promise((r) => sock.once("connect", r));
    expect(await closedWithin(sock, 15_000)).toBe(true);
    await stillServing();
  });
});

describe("the TLS port", () => {
  test("plaintext HTTP/2 or HTTP/1.1 on it: refused, counted and logged as a failed handshake", async () => {
    const before = secure.refused.tls_handshake;
    for (const bytes of [PREFACE, Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n")]) {
      const sock = net.connect(portOf(secure), "127.0.0.1");
      sock.on("error", () => {});
      sock.write(bytes);
      await waitFor("the handshake failure", () => secure.refused.tls_handshake > before);
      // Bun closes its end without a FIN: the client learns it at its next write.
      await waitFor(
        "the connection closed",
        () => {
          if (!sock.destroyed) sock.write("more");
          return sock.destroyed;
        },
        10_000,
      );
    }
    await waitFor("both refusals counted", () => secure.refused.tls_handshake >= before + 2);
    expect(log.lines.some((l) => l.includes("refused API client") && l.includes("reason=tls_handshake"))).toBe(true);
    await stillServing();
  });

  test("garbage after a good handshake: GOAWAY or closed, the brain serves on", async () => {
    const conn = await rawH2(portOf(secure), { tls: { ca: cert.cert }, preface: false });
    conn.write(Buffer.from("this is not the HTTP/2 preface, not at all\r\n\r\n"));
    const goaway = await conn.until((f) => f.type === FRAME.GOAWAY);
    expect(goaway || conn.closed).toBe(true);
    conn.close();
    await stillServing();
  });
});

describe("a consumer that stops reading", () => {
  test(`a global stream whose client reads nothing for ${STUCK_MS} ms is reset and counted; the others are served`, async () => {
    const before = plain.stats.stuckDropped;
    // No WINDOW_UPDATE ever: the brain may send 65,535 bytes, then its writes wait.
    const conn = await rawH2(portOf(plain));
    conn.write(frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, headerBlock(grpcRequestHeaders("/globalv1.Sets/Watch"))));
    conn.write(frame(FRAME.DATA, 0, 1, grpcMessage(Buffer.alloc(0))));
    expect(await conn.until((f) => f.type === FRAME.RST_STREAM && f.stream === 1)).toBe(true);
    expect(conn.dataBytes(1)).toBeLessThanOrEqual(65_535);
    expect(plain.stats.stuckDropped).toBe(before + 1);
    expect(log.lines.some((l) => l.includes("dropped a stream whose client stopped reading") && l.includes("rpc=GlobalWatch"))).toBe(true);
    conn.close();
    await stillServing();
  });

  test(`a Connect stream (HTTP/2, JSON) whose client reads nothing for ${STUCK_MS} ms is reset too`, async () => {
    const before = plain.stats.stuckDropped;
    const conn = await rawH2(portOf(plain));
    const json = Buffer.from(JSON.stringify({ NodeName: "node-1" }));
    const headers = { ...grpcRequestHeaders("/localv1.Endpoints/Next"), "content-type": "application/connect+json" };
    delete (headers as Record<string, string>).te;
    conn.write(frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, headerBlock(headers)));
    conn.write(frame(FRAME.DATA, FLAG.END_STREAM, 1, grpcMessage(json)));
    expect(await conn.until((f) => f.type === FRAME.RST_STREAM && f.stream === 1)).toBe(true);
    expect(plain.stats.stuckDropped).toBe(before + 1);
    expect(
      log.lines.some((l) => l.includes("dropped a stream whose client stopped reading") && l.includes("rpc=/localv1.Endpoints/Next")),
    ).toBe(true);
    conn.close();
    await stillServing();
  });

  test("a client that reads slowly but reads is not dropped", async () => {
    const before = plain.stats.stuckDropped;
    const conn = connectGrpc({ kind: "tcp", host: "127.0.0.1", port: portOf(plain) });
    try {
      const messages = conn.call(
        "/globalv1.Sets/Watch",
        (async function* () {
          yield new Uint8Array(0);
        })(),
        AbortSignal.timeout(20_000),
      );
      let bytes = 0;
      for (;;) {
        const r = await messages.next();
        if (r.done) break;
        for (const m of r.value) bytes += m.length;
        await Bun.sleep(STUCK_MS / 3); // slower than the brain writes, faster than the limit
        if (r.value.some((m) => m.length === 2 && m[0] === 0x0a)) break; // the first Sync
      }
      expect(bytes).toBeGreaterThan(65_535);
      expect(plain.stats.stuckDropped).toBe(before);
    } catch (err) {
      throw GrpcError.from(err, 2);
    } finally {
      conn.close();
    }
  });
});

describe("whole models go out in turns", () => {
  test("a stuck client holds its turn only until it is dropped; a connected stream's change sets never wait for one", async () => {
    const gen = { services: 400, endpoints: 10, nodes: 3 };
    const brain = brainWith(gen);
    const server = await startApiServer({
      brain,
      listen: ["tcp://127.0.0.1:0"],
      defaultNodeName: "node-1",
      log,
      stuckMs: 3000,
      wholeModelsAtOnce: 1,
    });
    const port = portOf(server);
    const isSync = (m: Uint8Array) => m.length === 2 && m[0] === 0x0a;
    /** a global stream asking for one change set at a time; resolves the times its Syncs arrived */
    const follow = (conn: ReturnType<typeof connectGrpc>, syncs: number[]) => {
      const next = { ask: () => {} };
      const reqs = (async function* () {
        for (;;) {
          yield new Uint8Array(0);
          await new Promise<void>((r) => (next.ask = r));
        }
      })();
      void (async () => {
        for await (const batch of conn.call("/globalv1.Sets/Watch", reqs, AbortSignal.timeout(30_000))) {
          for (const m of batch)
            if (isSync(m)) {
              syncs.push(server.stats.stuckDropped);
              next.ask();
            }
        }
      })().catch(() => {});
    };
    const a = connectGrpc({ kind: "tcp", host: "127.0.0.1", port });
    const b = connectGrpc({ kind: "tcp", host: "127.0.0.1", port });
    const stuck = await rawH2(port);
    try {
      const aSyncs: number[] = [];
      follow(a, aSyncs);
      await waitFor("the first stream's model", () => aSyncs.length === 1, LOADED_WAIT_MS);
      // Takes the only turn and reads no more than its first window of it.
      stuck.write(frame(FRAME.HEADERS, FLAG.END_HEADERS, 1, headerBlock(grpcRequestHeaders("/globalv1.Sets/Watch"))));
      stuck.write(frame(FRAME.DATA, 0, 1, grpcMessage(Buffer.alloc(0))));
      await waitFor("the stuck stream's first bytes", () => stuck.dataBytes(1) > 0, LOADED_WAIT_MS);
      const bSyncs: number[] = [];
      follow(b, bSyncs);
      // A change meanwhile reaches the connected stream before the stuck one is dropped.
      const [, slice] = serviceObjects(gen, 7);
      slice.endpoints[0].conditions.ready = false;
      upsert(brain, slice);
      await waitFor("the change on the first stream", () => aSyncs.length === 2, LOADED_WAIT_MS);
      expect(aSyncs[1]).toBe(0);
      // The new stream's model waited for the turn: it came after the drop.
      await waitFor("the new stream's model", () => bSyncs.length === 1, LOADED_WAIT_MS);
      expect(bSyncs[0]).toBe(1);
    } finally {
      a.close();
      b.close();
      stuck.close();
      await server.close();
    }
  });
});
