// Holds the error codes the SDK produces itself against both places an app developer looks them up:
// docs/browser.md "Errors" and the CallingSdkErrorCode type of calling-client.d.ts. The produced
// codes are read from the module's source (every `code: "…"` it constructs a CallingError with,
// every `error.code = "…"` and the fallback of a problem without a code), so a new code cannot be
// added without documenting it, and a documented code the SDK no longer produces fails as well.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";

const read = (path) => readFileSync(new URL(`../../${path}`, import.meta.url), "utf8");
const source = read("sdk/js/calling-client.js");
const dts = read("sdk/js/calling-client.d.ts");
const doc = read("docs/browser.md");

function producedCodes() {
  const codes = new Set();
  for (const pattern of [/\bcode:\s*"([a-z_]+)"/g, /\.code\s*=\s*"([a-z_]+)"/g, /\.code\s*\|\|\s*"([a-z_]+)"/g]) {
    for (const match of source.matchAll(pattern)) codes.add(match[1]);
  }
  return codes;
}

function typedCodes() {
  const match = /export type CallingSdkErrorCode\s*=([^;]+);/.exec(dts);
  assert.ok(match, "export type CallingSdkErrorCode in calling-client.d.ts");
  return new Set([...match[1].matchAll(/"([a-z_]+)"/g)].map((m) => m[1]));
}

/** The `code` column of the table in docs/browser.md "Errors". */
function documentedCodes() {
  const start = doc.indexOf("\n## Errors\n");
  assert.ok(start >= 0, "an Errors section in docs/browser.md");
  const section = doc.slice(start, doc.indexOf("\n## ", start + 1));
  const codes = new Set();
  for (const line of section.split("\n")) {
    if (!line.startsWith("| `")) continue;
    const cell = line.split("|")[1];
    for (const match of cell.matchAll(/`([a-z_]+)`/g)) codes.add(match[1]);
  }
  return codes;
}

test("the source scan finds the SDK's codes (a scan finding nothing would hold nothing)", () => {
  const codes = producedCodes();
  for (const code of ["not_connected", "invalid_argument", "http_error", "connect_failed", "replaced"]) {
    assert.ok(codes.has(code), `${code} not found in calling-client.js`);
  }
});

test("every code the SDK produces is in docs/browser.md Errors, and nothing else is", () => {
  assert.deepEqual([...documentedCodes()].sort(), [...producedCodes()].sort());
});

test("every code the SDK produces is in the CallingSdkErrorCode type, and nothing else is", () => {
  assert.deepEqual([...typedCodes()].sort(), [...producedCodes()].sort());
});
