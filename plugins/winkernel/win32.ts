// Pure Win32 marshalling helpers for the HCN FFI client, kept apart so they
// are tested on Linux: UTF-16 strings (PCWSTR) and GUIDs (REFGUID).

/** A NUL-terminated UTF-16LE string, as PCWSTR parameters take. */
export function wideString(s: string): Uint8Array {
  const buf = Buffer.alloc((s.length + 1) * 2);
  buf.write(s, 0, "utf16le");
  return buf;
}

/** Decodes UTF-16LE code units up to the first NUL. */
export function fromWide(bytes: Uint8Array): string {
  let end = 0;
  while (end + 1 < bytes.length && (bytes[end] !== 0 || bytes[end + 1] !== 0)) end += 2;
  return Buffer.from(bytes.buffer, bytes.byteOffset, end).toString("utf16le");
}

const guidPattern = /^\{?([0-9a-f]{8})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{4})-([0-9a-f]{12})\}?$/i;

/** A GUID struct: Data1 (u32), Data2, Data3 (u16) little-endian, then Data4's 8 bytes in order. */
export function guidBytes(guid: string): Uint8Array {
  const m = guidPattern.exec(guid);
  if (!m) throw new Error(`not a GUID: ${guid}`);
  const out = new Uint8Array(16);
  const view = new DataView(out.buffer);
  view.setUint32(0, parseInt(m[1]!, 16), true);
  view.setUint16(4, parseInt(m[2]!, 16), true);
  view.setUint16(6, parseInt(m[3]!, 16), true);
  const tail = m[4]! + m[5]!;
  for (let i = 0; i < 8; i++) out[8 + i] = parseInt(tail.slice(i * 2, i * 2 + 2), 16);
  return out;
}

export function guidString(bytes: Uint8Array): string {
  const view = new DataView(bytes.buffer, bytes.byteOffset, 16);
  const hex = (n: number, w: number) => n.toString(16).padStart(w, "0");
  const d4 = [...bytes.slice(8, 16)].map((b) => hex(b, 2)).join("");
  return `${hex(view.getUint32(0, true), 8)}-${hex(view.getUint16(4, true), 4)}-${hex(view.getUint16(6, true), 4)}-${d4.slice(0, 4)}-${d4.slice(4)}`;
}

/** HRESULTs are negative on failure; print them as Windows does (0x803B0006). */
export const hresultHex = (hr: number) => `0x${(hr >>> 0).toString(16).toUpperCase().padStart(8, "0")}`;
