// Holds docs/browser.md against the typings: every public method, property and event of the
// SDK's classes named in calling-client.d.ts must be documented there.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const root = new URL("../../", import.meta.url);
const dts = readFileSync(fileURLToPath(new URL("sdk/js/calling-client.d.ts", root)), "utf8");
const doc = readFileSync(fileURLToPath(new URL("docs/browser.md", root)), "utf8");

/** Body of `export class Name {…}` or `export interface Name {…}` (no nested braces at top level matter). */
function block(kind, name) {
  const start = dts.indexOf(`export ${kind} ${name}`);
  assert.ok(start >= 0, `${kind} ${name} in calling-client.d.ts`);
  let depth = 0;
  for (let i = dts.indexOf("{", start); i < dts.length; i++) {
    if (dts[i] === "{") depth++;
    if (dts[i] === "}" && --depth === 0) return dts.slice(dts.indexOf("{", start) + 1, i);
  }
  throw new Error(`unterminated ${name}`);
}

/** Top-level member names of a class or interface body (methods, properties, quoted event keys). */
function members(body) {
  const names = new Set();
  let depth = 0;
  for (const line of body.split("\n")) {
    const trimmed = line.trim();
    if (depth === 0 && !trimmed.startsWith("/") && !trimmed.startsWith("*")) {
      const match = /^(?:readonly\s+)?(?:"([^"]+)"|([A-Za-z_$][\w$]*))\??\s*[(:<]/.exec(trimmed);
      if (match && match[2] !== "constructor") names.add(match[1] ?? match[2]);
    }
    for (const ch of trimmed) {
      if (ch === "{") depth++;
      if (ch === "}") depth--;
    }
  }
  return [...names];
}

const publicClasses = ["CallingClient", "PresenceClient", "WebCallClient"];
const eventMaps = ["CallingClientEvents", "PresenceClientEvents", "WebCallClientEvents"];

test("every public method and property of the SDK is in docs/browser.md", () => {
  for (const name of publicClasses) {
    const missing = members(block("class", name)).filter((member) => !doc.includes(`\`${member}`) && !doc.includes(`${member}(`));
    assert.deepEqual(missing, [], `${name} members missing from docs/browser.md`);
  }
});

test("every event of the SDK is in docs/browser.md", () => {
  for (const name of eventMaps) {
    const missing = members(block("interface", name)).filter((event) => !doc.includes(`\`${event}\``));
    assert.deepEqual(missing, [], `${name} events missing from docs/browser.md`);
  }
});

test("every option of the SDK's constructors is in docs/browser.md", () => {
  for (const name of ["CallingClientOptions", "PresenceClientOptions", "WebCallClientOptions"]) {
    const missing = members(block("interface", name)).filter((option) => !doc.includes(`\`${option}\``) && !doc.includes(`${option}?`) && !doc.includes(`${option},`));
    assert.deepEqual(missing, [], `${name} options missing from docs/browser.md`);
  }
});
