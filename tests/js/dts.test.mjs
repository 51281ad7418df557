// Holds sdk/js/calling-client.d.ts against the module: every runtime export is declared and every
// declared value exists; each class's public methods and properties match in both directions.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import * as sdk from "../../sdk/js/calling-client.js";

const dts = readFileSync(new URL("../../sdk/js/calling-client.d.ts", import.meta.url), "utf8")
  // Comments out, so that examples in them cannot count as declarations.
  .replace(/\/\*[\s\S]*?\*\//g, "")
  .replace(/\/\/.*$/gm, "");

/** `export class|function|const NAME` in the .d.ts. */
function declaredValues() {
  const names = new Set();
  for (const m of dts.matchAll(/^export\s+(?:declare\s+)?(?:class|function|const|let)\s+([A-Za-z_$][\w$]*)/gm)) names.add(m[1]);
  return names;
}

/** The body of `export class NAME … { … }`, braces balanced. */
function classBody(name) {
  const start = dts.search(new RegExp(`^export\\s+class\\s+${name}\\b`, "m"));
  assert.ok(start >= 0, `class ${name} in the .d.ts`);
  const open = dts.indexOf("{", start);
  let depth = 0;
  for (let i = open; i < dts.length; i++) {
    if (dts[i] === "{") depth++;
    else if (dts[i] === "}" && --depth === 0) return dts.slice(open + 1, i);
  }
  throw new Error(`unbalanced class ${name}`);
}

/** Members at the top level of a class body: methods `name(` / `name<`, properties `readonly name:` / `name?:`. */
function declaredMembers(name) {
  const body = classBody(name);
  // Keep depth-0 text only (drop nested object types and parameter lists' braces).
  let flat = "";
  let depth = 0;
  for (const ch of body) {
    if (ch === "{") depth++;
    if (depth === 0) flat += ch;
    if (ch === "}") depth--;
  }
  const methods = new Set();
  const properties = new Set();
  for (const raw of flat.split(/;\s*\n|\n/)) {
    const line = raw.trim();
    if (!line) continue;
    let m = line.match(/^(?:static\s+)?([A-Za-z_$][\w$]*)\s*(?:<[^(]*>)?\s*\(/);
    if (m && m[1] !== "constructor") {
      methods.add(m[1]);
      continue;
    }
    m = line.match(/^(?:readonly\s+)?([A-Za-z_$][\w$]*)\??\s*:/);
    if (m) properties.add(m[1]);
  }
  return { methods, properties };
}

/** Public methods and getters of a class, along its prototype chain (names without a leading `_`). */
function runtimeMembers(cls) {
  const methods = new Set();
  const getters = new Set();
  for (let proto = cls.prototype; proto && proto !== Object.prototype && proto !== Error.prototype; proto = Object.getPrototypeOf(proto)) {
    for (const key of Object.getOwnPropertyNames(proto)) {
      if (key === "constructor" || key.startsWith("_")) continue;
      const d = Object.getOwnPropertyDescriptor(proto, key);
      if (typeof d.value === "function") methods.add(key);
      else if (d.get) getters.add(key);
    }
  }
  return { methods, getters };
}

const sorted = (set) => Array.from(set).sort();

test("every runtime export is declared in the .d.ts, and every declared value is exported", () => {
  assert.deepEqual(sorted(declaredValues()), sorted(Object.keys(sdk)));
  for (const [name, value] of Object.entries(sdk)) {
    const kind = /^export\s+class\s+/m.test(dts.match(new RegExp(`^export\\s+(?:class|function)\\s+${name}\\b.*$`, "m"))?.[0] || "") ? "class" : "function";
    assert.equal(typeof value, "function", name);
    const isClass = /^class\s/.test(Function.prototype.toString.call(value));
    assert.equal(isClass, kind === "class", `${name} is declared as a ${kind}`);
  }
});

test("each class: public methods match in both directions; getters are declared properties", () => {
  const classes = Object.entries(sdk).filter(([, v]) => /^class\s/.test(Function.prototype.toString.call(v)));
  assert.ok(classes.length >= 9);
  for (const [name, cls] of classes) {
    const declared = declaredMembers(name);
    const runtime = runtimeMembers(cls);
    assert.deepEqual(sorted(declared.methods), sorted(runtime.methods), `methods of ${name}`);
    for (const getter of runtime.getters) assert.ok(declared.properties.has(getter), `${name}.${getter} is declared`);
    if (name !== "CallingError") {
      // Every declared property is a getter (CallingError's are instance fields, checked below).
      assert.deepEqual(sorted(declared.properties), sorted(runtime.getters), `properties of ${name}`);
    }
  }
  const error = new sdk.CallingError("x", { code: "c", status: 1, retryable: true, closeCode: 2, frameType: "t" });
  for (const field of ["code", "status", "retryable", "closeCode", "frameType"]) {
    assert.ok(declaredMembers("CallingError").properties.has(field), `CallingError.${field}`);
    assert.ok(field in error, `CallingError has ${field}`);
  }
  assert.ok(error instanceof Error);
});

test("the events named in the .d.ts are the ones the API sketch lists", () => {
  const events = (iface) => {
    const start = dts.indexOf(`export interface ${iface}`);
    const body = dts.slice(dts.indexOf("{", start) + 1, dts.indexOf("\n}", start));
    return new Set(Array.from(body.matchAll(/^\s+"?([a-z-]+)"?\s*:/gm), (m) => m[1]));
  };
  const room = events("CallingClientEvents");
  for (const name of ["connected", "peer-joined", "peer-left", "incoming", "track", "connection-state", "hangup", "rejected", "data", "meter",
    "consultation-ended", "stats", "error", "disconnected", "reconnecting", "chat", "typing", "read"]) {
    assert.ok(room.has(name), `CallingClient event ${name}`);
  }
  const presence = events("PresenceClientEvents");
  for (const name of ["connected", "status", "request", "accepted", "ended", "error", "closed", "disconnected"]) assert.ok(presence.has(name), `PresenceClient event ${name}`);
  const web = events("WebCallClientEvents");
  for (const name of ["status", "control", "track", "connection-state", "ended", "error", "reconnecting"]) assert.ok(web.has(name), `WebCallClient event ${name}`);
});
