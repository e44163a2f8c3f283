// The brain's gatekeeper without sockets: what it logs and counts.

import { expect, test } from "bun:test";
import { Authenticator } from "../../../src/core/api/server/auth.ts";
import { memoryLogger } from "../../../src/core/log.ts";

test("failed handshakes: all counted, at most 10 WARN lines a minute, the 10th says the rest go unlogged", () => {
  const log = memoryLogger();
  const auth = new Authenticator({ certificates: true }, log);
  const t0 = 1_000_000;
  for (let i = 0; i < 25; i++) auth.handshakeFailed("TLS handshake ended by the client", "192.0.2.7", t0 + i * 1000);
  expect(auth.refused.tls_handshake).toBe(25);
  expect(log.lines).toHaveLength(10);
  expect(log.lines[9]).toContain("further failed handshakes this minute are counted, not logged");
  // a minute later: logged again
  auth.handshakeFailed("TLS handshake ended by the client", "192.0.2.7", t0 + 61_000);
  expect(log.lines).toHaveLength(11);
  expect(auth.refused.tls_handshake).toBe(26);
});

test("with neither certificates nor tokens configured, everyone is let in and nothing is counted", async () => {
  const auth = new Authenticator({ certificates: false }, memoryLogger());
  expect(auth.required).toBe(false);
  expect(await auth.check({ authorized: false }, undefined)).toEqual({ ok: true, who: "anyone" });
  expect(Object.values(auth.refused).every((n) => n === 0)).toBe(true);
});
