// Wrong arguments from JS (what an untyped caller, or ArkTS code around the typed wrappers, can
// pass): every export, every class member and every constructor answers them with a coded error
// (`code` a stable snake_case code, `layer` a string, a message), thrown or as a rejection; never
// napi's own error codes, never a crash.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadModule, throwsWithCode } from './helper.mjs';

const native = loadModule();
const { Agent, ToolRegistry } = native;
const STABLE = /^[a-z][a-z0-9]*(_[a-z0-9]+)*$/;

// Argument lists that fit no member's parameters in at least one position.
const BAD = [
  [],
  [undefined, undefined, undefined],
  [null, null, null],
  [1, 2, 3],
  [true, false],
  [{}, {}, {}],
  [[], []],
  ['x', 5, {}],
  [() => 1, () => 2],
  [Symbol('s')],
  [10n],
];

/** Calls `f`; resolves to the error it threw or rejected with, or undefined when it succeeded. */
async function failure(f) {
  try {
    const r = f();
    if (r instanceof Promise) await r;
    return undefined;
  } catch (e) {
    return e;
  }
}

function assertCoded(error, what) {
  assert.ok(error instanceof Error, `${what}: not an Error: ${String(error)}`);
  assert.match(String(error.code), STABLE, `${what}: code ${error.code} (${error.message})`);
  assert.equal(typeof error.layer, 'string', `${what}: no layer (${error.code}: ${error.message})`);
  assert.ok(error.message.length > 0, `${what}: empty message`);
}

/** Fresh instances, so a call that succeeds on one does not change what the next one sees. */
const instances = {
  Agent: () => new native.Agent({ provider: 'scripted', scriptJson: '[]' }),
  ToolRegistry: () => new native.ToolRegistry(),
  CancellationHandle: () => new native.CancellationHandle(),
};

test('every exported function answers wrong arguments with a coded error', async () => {
  for (const [name, value] of Object.entries(native)) {
    if (typeof value !== 'function' || name in instances) continue;
    for (const args of BAD) {
      const e = await failure(() => value(...args));
      if (e !== undefined) assertCoded(e, `${name}(${args.map(String)})`);
    }
  }
});

test('every constructor answers wrong arguments with a coded error', async () => {
  for (const name of Object.keys(instances)) {
    for (const args of BAD) {
      const e = await failure(() => new native[name](...args));
      if (e !== undefined) assertCoded(e, `new ${name}(${args.map(String)})`);
    }
  }
});

test('every class member answers wrong arguments with a coded error', async () => {
  let refused = 0;
  for (const [name, make] of Object.entries(instances)) {
    const proto = native[name].prototype;
    // Methods only (getters take no arguments).
    const members = Object.getOwnPropertyNames(proto)
      .filter((m) => m !== 'constructor' && typeof Object.getOwnPropertyDescriptor(proto, m).value === 'function');
    assert.ok(members.length > 0, name);
    for (const member of members) {
      for (const args of BAD) {
        const e = await failure(() => make()[member](...args));
        if (e !== undefined) {
          assertCoded(e, `${name}.${member}(${args.map(String)})`);
          refused++;
        }
      }
    }
  }
  assert.ok(refused > 50, `only ${refused} calls were refused: the harness calls too little`);
});

test('an instance of another class of the module is refused where a class is expected', async () => {
  // napi's own class arguments only unwrap the native object: a CancellationHandle given for a
  // ToolRegistry was read as one (undefined behaviour). They are checked with instanceof first.
  const registry = new native.ToolRegistry();
  const handle = new native.CancellationHandle();
  const agent = instances.Agent();
  const call = { id: 'c1', name: 'missing', arguments: '{}' };
  for (const wrong of [handle, agent]) {
    assertCoded(await failure(() => registry.copyInto(wrong)), 'copyInto');
    assertCoded(await failure(() => registry.copyIntoExcluding(wrong, [])), 'copyIntoExcluding');
  }
  for (const wrong of [registry, agent]) {
    const e = await failure(() => registry.execute(call, wrong));
    assertCoded(e, 'execute(signal)');
    assert.equal(e.code, 'argument_invalid');
    assert.equal((await failure(() => agent.run('s', 'hi', wrong))).code, 'argument_invalid');
    assert.equal((await failure(() => agent.resume('s', wrong))).code, 'argument_invalid');
  }
  // The right classes still pass.
  registry.copyInto(new native.ToolRegistry());
  assert.equal((await failure(() => registry.execute(call, handle))).code, 'tool_not_found');
});

test('an object of one class dressed as another, or a getter called on another class, is refused', async () => {
  // instanceof reads only the prototype chain, which JS may set at will: a CancellationHandle's
  // constructor run on an object whose prototype is ToolRegistry's made an object that passed
  // instanceof ToolRegistry and was read as one (the process hung or aborted). A getter taken off
  // the handle's prototype and called on an Agent read the Agent as a handle (SIGSEGV).
  const registry = new native.ToolRegistry();
  const agent = instances.Agent();
  const call = { id: 'c1', name: 'missing', arguments: '{}' };
  const handleAsRegistry = Object.create(native.ToolRegistry.prototype);
  native.CancellationHandle.call(handleAsRegistry);
  assert.ok(handleAsRegistry instanceof native.ToolRegistry);
  const registryAsHandle = Object.create(native.CancellationHandle.prototype);
  native.ToolRegistry.call(registryAsHandle);
  assert.ok(registryAsHandle instanceof native.CancellationHandle);
  const realHandle = new native.CancellationHandle();
  const realRegistry = new native.ToolRegistry();
  Object.setPrototypeOf(realHandle, native.ToolRegistry.prototype);
  Object.setPrototypeOf(realRegistry, native.CancellationHandle.prototype);
  for (const fake of [handleAsRegistry, realHandle]) {
    for (const e of [await failure(() => registry.copyInto(fake)), await failure(() => registry.copyIntoExcluding(fake, []))]) {
      assertCoded(e, 'copyInto(fake)');
      assert.equal(e.code, 'argument_invalid');
      assert.match(e.message, /expected a ToolRegistry, got an object of another class/);
    }
  }
  for (const fake of [registryAsHandle, realRegistry]) {
    for (const f of [() => agent.run('s', 'hi', fake), () => agent.resume('s', fake), () => registry.execute(call, fake)]) {
      const e = await failure(f);
      assertCoded(e, 'signal(fake)');
      assert.equal(e.code, 'argument_invalid');
      assert.match(e.message, /expected a CancellationHandle, got an object of another class/);
    }
  }
  // Members of one class called on an object of another: refused before the object is read.
  const getters = ['cancelled', 'reason'];
  for (const name of getters) {
    for (const other of [agent, registry]) {
      const e = await failure(() => Reflect.get(native.CancellationHandle.prototype, name, other));
      assertCoded(e, `${name} on another class`);
      assert.equal(e.code, 'argument_invalid');
      assert.match(e.message, /not a CancellationHandle/);
    }
  }
  // Methods check their receiver too. V8 refuses a receiver its class's constructor did not
  // make before the method runs (a TypeError, "Illegal invocation"); an engine that does not gets
  // argument_invalid from the method. Either way nothing is read as the wrong class.
  for (const [f, what] of [
    [() => registryAsHandle.cancel('x'), 'cancel on a registry'],
    [() => native.CancellationHandle.prototype.cancel.call(agent, 'x'), 'cancel on an agent'],
    [() => handleAsRegistry.names(), 'names on a handle'],
    [() => native.Agent.prototype.toolNames.call(realHandle), 'toolNames on a handle'],
  ]) {
    const e = await failure(f);
    assert.ok(e instanceof TypeError || e?.code === 'argument_invalid', `${what}: ${e}`);
  }
  // The real objects still work.
  registry.copyInto(new native.ToolRegistry());
  const handle = new native.CancellationHandle();
  handle.cancel('why');
  assert.equal(handle.cancelled, true);
  assert.equal(handle.reason, 'why');
});

test('a wrong argument is described in JavaScript terms, naming the field', async () => {
  const message = (f) => {
    try {
      f();
    } catch (e) {
      assert.equal(e.code, 'argument_invalid');
      return e.message;
    }
    assert.fail('no error');
  };
  const registry = new native.ToolRegistry();
  const cases = [
    [() => new native.Agent(5), 'wrong argument: expected an object, got a number'],
    [() => new native.Agent({ provider: 1 }), 'wrong argument: provider: expected a string, got a number (1)'],
    [() => new native.Agent({ provider: 'scripted', maxRounds: 'x' }), 'wrong argument: maxRounds: expected a number, got a string'],
    [() => new native.Agent({ provider: 'scripted', streaming: 1 }), 'wrong argument: streaming: expected a boolean'],
    [() => registry.register({ name: 'a', description: 'd', parametersJson: '{}' }, 5), 'wrong argument: expected a function, got a number'],
    [() => registry.copyInto(new native.CancellationHandle()), 'wrong argument: expected a ToolRegistry'],
    // A positional argument is named.
    [() => instances.Agent().run('s', null), 'wrong argument: input: expected a string, got null'],
    [() => instances.Agent().run(5, 'x'), 'wrong argument: sessionId: expected a string, got a number'],
  ];
  for (const [f, expected] of cases) assert.equal(message(f), expected);
  // Every refusal of the BAD argument lists: no Rust type or struct names.
  for (const args of BAD) {
    const e = await failure(() => new native.Agent(...args));
    if (e === undefined) continue;
    assert.doesNotMatch(e.message, /rust type|Expect value|Object\.|AgentConfigObject|Option</, e.message);
  }
});

test('a getter or a Proxy trap that throws while an argument is read is refused with a coded error', () => {
  const throwing = (what) => ({ get() { throw what; } });
  const agent = () => new Agent({ provider: 'scripted', scriptJson: '[]' });
  const cases = [
    [() => new ToolRegistry().register({ get name() { throw new Error('boom'); }, description: 'd', parametersJson: '{}' }, () => undefined), /name: reading it threw Error: boom/],
    [() => new ToolRegistry().register(new Proxy({}, throwing('a string')), () => undefined), /reading it threw a string/],
    [() => new Agent({ provider: 'scripted', get stateDir() { throw new Error('sd'); } }), /stateDir: reading it threw Error: sd/],
    [() => new ToolRegistry({ get defaultTimeoutMs() { throw new Error('t'); } }), /defaultTimeoutMs: reading it threw/],
    [() => new ToolRegistry().execute({ id: 'c', name: 'x', get arguments() { throw new Error('a'); } }), /arguments: reading it threw/],
    [() => new ToolRegistry().execute({ id: 'c', name: 'x', arguments: '{}' }, undefined, new Proxy({}, throwing(new Error('o')))), /reading it threw Error: o/],
    [() => agent().addHook({ onRunStart() {}, get onRunEnd() { throw new Error('h'); } }), /hook property onRunEnd could not be read: reading it threw Error: h/],
    [() => agent().addHook(new Proxy({}, throwing(7))), /hook property onRunStart could not be read: reading it threw 7/],
  ];
  for (const [call, message] of cases) {
    const e = throwsWithCode(assert, call, 'argument_invalid', 'config');
    assert.match(e.message, message);
  }
  // Nothing is left pending: the next call works.
  assert.deepEqual(new ToolRegistry().names(), []);
});

test('a constructor called without new, or again on a live object, is refused and changes nothing', () => {
  const args = { Agent: [{ provider: 'scripted', scriptJson: '[]' }], ToolRegistry: [], CancellationHandle: [] };
  const works = {
    Agent: (o) => assert.equal(o.definitionsJson(), '[]'),
    ToolRegistry: (o) => assert.equal(o.definitionsJson(), '[]'),
    CancellationHandle: (o) => assert.equal(o.cancelled, false),
  };
  for (const name of Object.keys(instances)) {
    const C = native[name];
    // Plain calls: before, napi wrapped the global object (ToolRegistry() returned globalThis as a
    // ToolRegistry) and every later such call failed with napi's "Failed to initialize class".
    for (const receiver of [undefined, globalThis]) {
      const e = throwsWithCode(assert, () => C.call(receiver, ...args[name]), 'argument_invalid', 'config');
      assert.match(e.message, new RegExp(`new ${name}\\(`), e.message);
    }
    // On a live object (of this class or another): refused, and the object keeps working.
    for (const other of Object.keys(instances)) {
      const live = instances[other]();
      throwsWithCode(assert, () => C.call(live, ...args[name]), 'argument_invalid', 'config');
      works[other](live);
    }
    // new, Reflect.construct and a subclass still build working objects.
    works[name](new C(...args[name]));
    works[name](Reflect.construct(C, args[name]));
    class Sub extends C {}
    const sub = new Sub(...args[name]);
    assert.ok(sub instanceof C);
    works[name](sub);
  }
  // A second load of the module on this thread (napi-ohos then keeps the second load's
  // constructors) leaves the first load's classes constructible.
  const second = loadModule();
  for (const name of Object.keys(instances)) {
    works[name](new native[name](...args[name]));
    works[name](new second[name](...args[name]));
    throwsWithCode(assert, () => native[name].call(undefined, ...args[name]), 'argument_invalid', 'config');
  }
});
