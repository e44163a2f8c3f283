// The Windows-only parts that can be checked here: marshalling helpers, the
// lazy loading of computenetwork.dll, and the platform choice.

import { describe, expect, test } from "bun:test";
import { KpngError } from "../../src/core/errors.ts";
import { memoryLogger } from "../../src/core/log.ts";
import factory from "../../plugins/winkernel/index.ts";
import { createHcnClient } from "../../plugins/winkernel/executor.ts";
import { conjureMac } from "../../plugins/winkernel/hns.ts";
import { fromWide, guidBytes, guidString, hresultHex, wideString } from "../../plugins/winkernel/win32.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { testConfig } from "./harness.ts";

describe("win32 marshalling", () => {
  test("GUID: Data1..3 little-endian, Data4 in order, and back", () => {
    const g = "01234567-89ab-cdef-0123-456789abcdef";
    expect([...guidBytes(g)]).toEqual([0x67, 0x45, 0x23, 0x01, 0xab, 0x89, 0xef, 0xcd, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
    expect(guidString(guidBytes(`{${g.toUpperCase()}}`))).toBe(g);
  });

  test("PCWSTR: UTF-16LE with a NUL terminator, and back", () => {
    expect([...wideString("aé")]).toEqual([0x61, 0, 0xe9, 0, 0, 0]);
    expect(fromWide(wideString('{"Name":"kpng"}'))).toBe('{"Name":"kpng"}');
  });

  test("HRESULT printed as Windows does", () => {
    expect(hresultHex(-2147024894)).toBe("0x80070002");
  });

  test("remote endpoint MAC: upstream's 02-11 prefix and the address bytes", () => {
    expect(conjureMac("02-11", v4.pod(2, 5))).toBe("02-11-c6-13-02-05");
    expect(conjureMac("02-11", v6.pod(2, 0x1234))).toBe("02-11-34-12-00-00");
  });
});

describe("platform choice", () => {
  test("the HCN client opens no DLL until its first call, then fails as `unavailable` off Windows", async () => {
    const client = createHcnClient("kpng-test"); // must not throw: nothing is loaded yet
    const err = await client.listLoadBalancers().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(KpngError);
    expect((err as KpngError).code).toBe("unavailable");
  });

  test("off Windows the factory runs on the recorder and says so", async () => {
    const log = memoryLogger();
    const backend = await factory({ config: testConfig(), log, out: () => {} });
    expect(backend.kind).toBe("incremental");
    expect(log.lines.some((l) => l.includes("WARN") && l.includes("recorded, not applied"))).toBe(true);
  });
});
