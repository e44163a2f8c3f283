// The next page of a list is asked for as soon as the current page's head
// shows its continue token; these are the heads it must read right.

import { describe, expect, test } from "bun:test";
import { continueToken } from "../../src/core/sources/kube-reflector.ts";

describe("continueToken: the next page's token from the head of a List body", () => {
  const cases: Array<{ name: string; head: string; want: string | null | undefined }> = [
    {
      name: "token in the metadata, before the items",
      head: '{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"12","continue":"eyJydiI6MTJ9"},"items":[{"metadata":{',
      want: "eyJydiI6MTJ9",
    },
    {
      name: "last page: metadata without continue",
      head: '{"kind":"ServiceList","metadata":{"resourceVersion":"12"},"items":[',
      want: null,
    },
    { name: "last page: empty continue", head: '{"metadata":{"resourceVersion":"12","continue":""},"items":[', want: "" },
    {
      name: "remainingItemCount beside the token",
      head: '{"metadata":{"resourceVersion":"12","continue":"abc=","remainingItemCount":500},"items":[',
      want: "abc=",
    },
    {
      name: "head cut inside the metadata: not known yet",
      head: '{"kind":"ServiceList","metadata":{"resourceVersion":"12","cont',
      want: undefined,
    },
    { name: "head cut inside the token: not known yet", head: '{"metadata":{"continue":"eyJy', want: undefined },
    { name: "a token with an escape is left to the full decode", head: '{"metadata":{"continue":"a\\u002fb"},"items":[', want: undefined },
    {
      name: "items before the metadata: an item's continue label is not the token",
      head: '{"items":[{"metadata":{"labels":{"continue":"x"}}}],"metadata":{"continue":"t"}}',
      want: null,
    },
  ];
  for (const c of cases) test(c.name, () => expect(continueToken(c.head)).toBe(c.want));
});
