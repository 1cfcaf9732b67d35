// Browser test of the built-in web admin UI.
//
// Starts the real liftbridge binary (LIFTBRIDGE_BIN, default
// target/debug/liftbridge) on free loopback ports with a temporary data
// directory, drives Debian's headless Chromium (/usr/bin/chromium, or
// CHROMIUM_BIN) through playwright-core, publishes with a raw NATS client
// over a TCP socket, and checks what the pages show. Screenshots go to
// target/ui-artifacts/. Run: `node --test tests/ui/` (exit code 1 on failure).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { freePort } from '../ports.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const ARTIFACTS = path.join(root, 'target', 'ui-artifacts');
const BIN = process.env.LIFTBRIDGE_BIN || path.join(root, 'target', 'debug', 'liftbridge');
const CHROMIUM = process.env.CHROMIUM_BIN || '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless=new',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-dev-shm-usage',
  '--disable-background-networking',
];

// ------------------------------------------------------------------ helpers

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `f` until it returns a truthy value; throws with `what` on timeout. */
async function waitUntil(what, f, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const v = await f();
      if (v) return v;
      last = v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what} (last: ${last})`);
    await sleep(100);
  }
}

/** The liftbridge binary on free ports, with the flags the Python tests use. */
class Server {
  constructor(extraYaml = '') {
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lb-ui-'));
    this.extraYaml = extraYaml;
    this.output = '';
  }

  /** Starts the node; resolves once /api/v1/health is ok, or (with
   * `degraded`) once it answers 503 "degraded" (a partition here cannot write). */
  async start({ degraded = false } = {}) {
    [this.grpcPort, this.natsPort, this.httpPort] = [await freePort(), await freePort(), await freePort()];
    const cfg = path.join(this.dir, 'liftbridge.yml');
    fs.writeFileSync(cfg,
      `listen: 127.0.0.1:${this.grpcPort}\n` +
      `nats.listen: 127.0.0.1:${this.natsPort}\n` +
      `http.listen: 127.0.0.1:${this.httpPort}\n` +
      'cursors:\n    stream.auto.pause.time: 0\n    stream.partitions: 1\n' +
      this.extraYaml);
    this.proc = spawn(BIN, ['-c', cfg, '-d', path.join(this.dir, 'data'), '--embedded-nats', '--raft-bootstrap-seed'],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    const collect = (d) => {
      this.output += d.toString();
    };
    this.proc.stdout.on('data', collect);
    this.proc.stderr.on('data', collect);
    let exited = null;
    this.proc.once('exit', (code) => {
      exited = code;
    });
    await waitUntil('liftbridge to serve gRPC', () => {
      if (exited !== null) throw new Error(`liftbridge exited with ${exited}:\n${this.output}`);
      return this.output.includes(`serving gRPC on 127.0.0.1:${this.grpcPort}`);
    }, 30000);
    if (degraded) {
      await waitUntil('/api/v1/health to say degraded', async () => {
        const r = await fetch(`${this.base}/api/v1/health`);
        return r.status === 503 && (await r.json()).status === 'degraded';
      }, 30000);
    } else {
      await waitUntil('/api/v1/health to be ok', async () => (await fetch(`${this.base}/api/v1/health`)).ok, 30000);
    }
    return this;
  }

  get base() {
    return `http://127.0.0.1:${this.httpPort}`;
  }

  /** A JSON API call from the test itself (to set up and to cross-check the UI). */
  async api(method, p, body, headers = {}) {
    const init = { method, headers: { ...headers } };
    if (body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const r = await fetch(this.base + p, init);
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  }

  /** Stops the process; the data directory is removed unless `keep`. */
  async stop(keep = false) {
    if (this.proc && this.proc.exitCode === null) {
      const done = new Promise((r) => this.proc.once('exit', r));
      this.proc.kill('SIGTERM');
      const t = setTimeout(() => this.proc.kill('SIGKILL'), 10000);
      await done;
      clearTimeout(t);
    }
    if (!keep) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A NATS client speaking the text protocol over a raw TCP socket. */
class RawNats {
  static async connect(port, name) {
    const c = new RawNats();
    c.sock = net.connect(port, '127.0.0.1');
    c.buf = '';
    c.pongs = 0;
    c.sock.on('data', (d) => {
      c.buf += d.toString('latin1');
      let i;
      while ((i = c.buf.indexOf('\r\n')) >= 0) {
        const line = c.buf.slice(0, i);
        c.buf = c.buf.slice(i + 2);
        if (line === 'PONG') c.pongs += 1;
        else if (line === 'PING') c.sock.write('PONG\r\n');
        else if (line.startsWith('-ERR')) c.err = line;
        else if (line.startsWith('INFO ')) c.info = JSON.parse(line.slice(5));
        // MSG payloads are not needed by this test; their lines are skipped.
      }
    });
    await waitUntil('NATS INFO', () => c.info, 5000);
    c.sock.write(`CONNECT ${JSON.stringify({ verbose: false, pedantic: false, headers: true, name, lang: 'node-raw', version: '1.0' })}\r\n`);
    await c.flush();
    return c;
  }

  pub(subject, payload) {
    const data = Buffer.isBuffer(payload) ? payload : Buffer.from(payload, 'utf8');
    this.sock.write(Buffer.concat([Buffer.from(`PUB ${subject} ${data.length}\r\n`), data, Buffer.from('\r\n')]));
  }

  /** HPUB: a message with NATS headers (`{name: value}`). */
  hpub(subject, headers, payload) {
    const head = Buffer.from('NATS/1.0\r\n' +
      Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('') + '\r\n');
    const data = Buffer.from(payload, 'utf8');
    this.sock.write(Buffer.concat([
      Buffer.from(`HPUB ${subject} ${head.length} ${head.length + data.length}\r\n`), head, data, Buffer.from('\r\n')]));
  }

  sub(subject, sid) {
    this.sock.write(`SUB ${subject} ${sid}\r\n`);
  }

  /** PING and wait for the PONG: everything sent before was processed. */
  async flush() {
    const want = this.pongs + 1;
    this.sock.write('PING\r\n');
    await waitUntil('PONG', () => {
      if (this.err) throw new Error(this.err);
      return this.pongs >= want;
    }, 5000);
  }

  close() {
    this.sock.destroy();
  }
}

// ------------------------------------------------------------------ fixtures

let server;
let browser;
let page;
let nats;
const pageErrors = [];

before(async () => {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  // Failure screenshots of an earlier run would mislead.
  for (const f of fs.readdirSync(ARTIFACTS)) {
    if (f.startsWith('failed-')) fs.rmSync(path.join(ARTIFACTS, f));
  }
  assert.ok(fs.existsSync(BIN), `liftbridge binary not found at ${BIN} (build it or set LIFTBRIDGE_BIN)`);
  assert.ok(fs.existsSync(CHROMIUM), `chromium not found at ${CHROMIUM} (apt-get install chromium)`);
  server = await new Server().start();
  browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS });
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  page = await ctx.newPage();
  page.setDefaultTimeout(15000);
  watchErrors(page);
  nats = await RawNats.connect(server.natsPort, 'ui-test-client');
});

after(async () => {
  nats?.close();
  await browser?.close();
  await server?.stop();
});

/** Records script errors and CSP violations (failed API calls are expected). */
function watchErrors(p) {
  p.on('pageerror', (e) => pageErrors.push(`pageerror: ${e.message}`));
  p.on('console', (m) => {
    if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) {
      pageErrors.push(`console: ${m.text()}`);
    }
  });
}

async function shot(p, name) {
  await p.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });
}

/** Runs `body`; on failure saves a screenshot named after the test first. */
function uiTest(name, body) {
  test(name, { timeout: 90000 }, async () => {
    try {
      await body();
    } catch (e) {
      const file = 'failed-' + name.replace(/[^a-z0-9]+/gi, '-').toLowerCase();
      await shot(page, file).catch(() => {});
      throw e;
    }
  });
}

const byTestId = (id) => `[data-testid="${id}"]`;
const streamRow = (name) => page.locator(`${byTestId('stream-row')}[data-stream="${name}"]`);
const texts = (sel) => page.locator(sel).allTextContents();

async function partitionInfo(stream, id = 0) {
  const r = await server.api('GET', `/api/v1/streams/${stream}/partitions/${id}`);
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body;
}

// ------------------------------------------------------------------ tests

uiTest('the overview shows the server and live message-rate charts', async () => {
  const info = (await server.api('GET', '/api/v1/info')).body;
  await page.goto(server.base + '/');
  assert.equal(await page.title(), 'liftbridge');
  await page.locator(byTestId('info-version')).filter({ hasText: info.version }).waitFor();
  assert.equal(await page.locator(byTestId('info-server-id')).textContent(), info.server_id);
  assert.match(await page.locator(byTestId('info-grpc')).textContent(), new RegExp(`:${server.grpcPort}$`));
  // The test's own NATS connection is counted.
  await waitUntil('the connection count', async () =>
    Number((await page.locator(byTestId('info-connections')).textContent()).replace(/\D/g, '')) >= 1);

  // Traffic while the page polls: the charts get points and a non-zero rate.
  for (let i = 0; i < 3; i += 1) {
    for (let j = 0; j < 50; j += 1) nats.pub('chart.traffic', `m${j}`);
    await nats.flush();
    await sleep(1000);
  }
  await waitUntil('two chart points', async () =>
    Number(await page.locator(byTestId('chart-in')).getAttribute('data-points')) >= 2);
  assert.equal(await page.locator(`${byTestId('chart-in')} svg polyline`).count(), 1);
  await waitUntil('a non-zero inbound rate', async () => {
    const t = await page.locator(byTestId('rate-in')).textContent();
    return /^[1-9][\d,.]* msg\/s$|^0\.\d*[1-9]\d* msg\/s$/.test(t);
  });
  // The cluster panel: a lone node is its own controller, with no routes.
  await page.locator(byTestId('cluster-node')).first().waitFor();
  assert.equal(await page.locator(byTestId('cluster-node')).count(), 1);
  assert.equal(await page.locator(byTestId('cluster-node-id')).textContent(), info.server_id);
  assert.equal(await page.locator(byTestId('cluster-controller')).count(), 1);
  assert.match(await page.locator(byTestId('cluster-summary')).textContent(), /1 node · this node is leader/);
  assert.equal(await page.locator(byTestId('cluster-no-routes')).count(), 1);
  await shot(page, 'overview');
});

uiTest('a stream is created through the form, and API errors show in the banner', async () => {
  await page.click(byTestId('nav-streams'));
  await page.locator(byTestId('create-stream-form')).waitFor();
  await page.fill(byTestId('create-name'), 'orders');
  await page.fill(byTestId('create-subject'), 'orders.eu');
  await page.fill(byTestId('create-partitions'), '1');
  await page.click(`${byTestId('create-stream-form')} summary`);
  await page.fill(byTestId('create-retention-messages'), '1000');
  await page.fill(byTestId('create-retention-age'), '2');
  await page.selectOption(byTestId('create-retention-age-unit'), 'h');
  await page.click(byTestId('create-submit'));
  await streamRow('orders').waitFor();
  assert.equal((await streamRow('orders').locator('td').nth(1).textContent()), 'orders.eu');
  await streamRow('orders').locator(byTestId('badge-active')).waitFor();

  const p = await partitionInfo('orders');
  assert.equal(p.config.retention_max_messages, 1000);
  assert.equal(p.config.retention_max_age_ms, 2 * 3600 * 1000);

  // The same name again: the API's 409 is shown in the banner.
  await page.fill(byTestId('create-name'), 'orders');
  await page.fill(byTestId('create-subject'), 'orders.eu');
  await page.click(byTestId('create-submit'));
  const banner = page.locator(byTestId('error-banner'));
  await banner.waitFor({ state: 'visible' });
  assert.match(await page.locator(byTestId('error-text')).textContent(), /^409: /);
  await page.click(byTestId('error-dismiss'));
  await banner.waitFor({ state: 'hidden' });
});

uiTest('messages published over NATS are browsed by offset, page and time, decoded three ways, and tailed live', async () => {
  // 24 JSON messages and one that is not UTF-8, through a plain NATS PUB.
  for (let i = 0; i < 24; i += 1) nats.pub('orders.eu', JSON.stringify({ n: i, text: `order ${i}` }));
  nats.pub('orders.eu', Buffer.from([0xff, 0x00, 0xfe, 0x41]));
  await nats.flush();
  await waitUntil('25 recorded messages', async () => (await partitionInfo('orders')).high_watermark === 24);

  await page.click(`${byTestId('stream-row')}[data-stream="orders"] ${byTestId('stream-link')}`);
  await page.locator(byTestId('partition-link')).first().click();
  await page.locator(byTestId('part-hw')).filter({ hasText: '24' }).waitFor();
  assert.equal(await page.locator(byTestId('part-oldest')).textContent(), '0');
  assert.match(await page.locator(byTestId('part-config')).textContent(), /1,000/);

  // From the oldest, 20 per page, then the next page.
  await page.selectOption(byTestId('page-size'), '20');
  await page.click(byTestId('seek-btn'));
  await waitUntil('20 messages', async () => (await page.locator(byTestId('message')).count()) === 20);
  let offsets = await texts(byTestId('message-offset'));
  assert.deepEqual(offsets, Array.from({ length: 20 }, (_, i) => String(i)));
  const first = page.locator(byTestId('message')).first();
  assert.equal(await first.locator(byTestId('message-value')).textContent(), '{"n":0,"text":"order 0"}');
  assert.equal(await first.locator(byTestId('message-subject')).textContent(), 'orders.eu');

  await page.click(byTestId('decode-json'));
  assert.equal(await first.locator(byTestId('message-value')).textContent(), '{\n  "n": 0,\n  "text": "order 0"\n}');

  await page.click(byTestId('next-btn'));
  await waitUntil('the second page', async () =>
    (await texts(byTestId('message-offset'))).join(',') === '20,21,22,23,24');
  const binary = page.locator(`${byTestId('message')}[data-offset="24"]`);
  await page.click(byTestId('decode-hex'));
  assert.match(await binary.locator(byTestId('message-value')).textContent(), /^0000 {2}ff 00 fe 41 {2}.*\.\.\.A$/);
  assert.match(await page.locator(`${byTestId('message')}[data-offset="20"] ${byTestId('message-value')}`).textContent(),
    /7b 22 6e 22 3a 32 30/); // {"n":20
  await page.click(byTestId('decode-text'));
  assert.match(await binary.textContent(), /not valid UTF-8/);

  // By offset.
  await page.selectOption(byTestId('seek-mode'), 'offset');
  await page.fill(byTestId('seek-offset'), '7');
  await page.click(byTestId('seek-btn'));
  await waitUntil('messages from offset 7', async () => (await texts(byTestId('message-offset')))[0] === '7');

  // By time: a minute ago is before the first message; an hour ahead is after the last.
  const local = (d) => {
    const pad = (x) => String(x).padStart(2, '0');
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  };
  await page.selectOption(byTestId('seek-mode'), 'time');
  await page.fill(byTestId('seek-time'), local(new Date(Date.now() - 60000)));
  await page.click(byTestId('seek-btn'));
  await waitUntil('messages since a minute ago', async () => (await texts(byTestId('message-offset')))[0] === '0');
  await page.fill(byTestId('seek-time'), local(new Date(Date.now() + 3600000)));
  await page.click(byTestId('seek-btn'));
  await page.locator(byTestId('no-messages')).waitFor();

  // The latest page, then live tail picks up a new message.
  await page.selectOption(byTestId('seek-mode'), 'latest');
  await page.click(byTestId('seek-btn'));
  await waitUntil('the latest page ends at 24', async () => (await texts(byTestId('message-offset'))).at(-1) === '24');
  await page.check(byTestId('live-tail'));
  await sleep(300);
  nats.pub('orders.eu', 'tail-me please');
  await nats.flush();
  await page.locator(byTestId('message-value')).filter({ hasText: 'tail-me please' }).waitFor();
  assert.equal((await texts(byTestId('message-offset'))).at(-1), '25');
  await page.uncheck(byTestId('live-tail'));
  await shot(page, 'partition');
});

uiTest('a message published from the partition view is stored with its key and headers', async () => {
  await page.goto(server.base + '/#/streams/orders/partitions/0');
  await page.click(`${byTestId('publish-form')} summary`);
  await page.fill(byTestId('publish-key'), 'customer-7');
  await page.fill(byTestId('publish-headers'), 'trace=abc, region=eu');
  await page.fill(byTestId('publish-value'), '{"from":"ui"}');
  await page.click(byTestId('publish-btn'));
  await page.locator(byTestId('publish-result')).filter({ hasText: 'stored at offset 26' }).waitFor();

  await page.selectOption(byTestId('seek-mode'), 'offset');
  await page.fill(byTestId('seek-offset'), '26');
  await page.click(byTestId('seek-btn'));
  const m = page.locator(`${byTestId('message')}[data-offset="26"]`);
  await m.waitFor();
  assert.equal(await m.locator(byTestId('message-key')).textContent(), 'customer-7');
  assert.equal(await m.locator(byTestId('message-value')).textContent(), '{"from":"ui"}');
  const headers = await m.locator(byTestId('message-headers')).textContent();
  assert.match(headers, /trace: abc/);
  assert.match(headers, /region: eu/);

  // NATS headers of a plain HPUB are recorded and shown too.
  nats.hpub('orders.eu', { 'X-Trace': 'nats-7' }, 'with headers');
  await nats.flush();
  await waitUntil('the HPUB recorded', async () => (await partitionInfo('orders')).high_watermark === 27);
  await page.fill(byTestId('seek-offset'), '27');
  await page.click(byTestId('seek-btn'));
  const hm = page.locator(`${byTestId('message')}[data-offset="27"]`);
  await hm.waitFor();
  assert.equal(await hm.locator(byTestId('message-value')).textContent(), 'with headers');
  assert.match(await hm.locator(byTestId('message-headers')).textContent(), /X-Trace: nats-7/);

  // This partition alone paused and resumed, with the time it was paused.
  await page.click(`${byTestId('partition-details')} ~ .row ${byTestId('pause-btn')}`);
  await page.locator(`${byTestId('partition-state')} ${byTestId('badge-paused')}`).waitFor();
  assert.match(await page.locator(byTestId('part-paused')).textContent(), /^yes, since \d{4}-\d\d-\d\d /);
  await page.click(`${byTestId('partition-details')} ~ .row ${byTestId('resume-btn')}`);
  await page.locator(`${byTestId('partition-state')} ${byTestId('badge-active')}`).waitFor();
  assert.equal(await page.locator(byTestId('part-paused')).textContent(), 'no');
});

uiTest('pause, resume and read-only from the streams table change the badges', async () => {
  await page.click(byTestId('nav-streams'));
  const row = streamRow('orders');
  await row.locator(byTestId('badge-active')).waitFor();

  await row.locator(byTestId('pause-btn')).click();
  await row.locator(byTestId('badge-paused')).waitFor();
  assert.equal((await partitionInfo('orders')).paused, true);
  assert.equal(await row.locator(byTestId('pause-btn')).count(), 0);
  await shot(page, 'streams-paused');

  await row.locator(byTestId('resume-btn')).click();
  await row.locator(byTestId('badge-active')).waitFor();
  assert.equal((await partitionInfo('orders')).paused, false);

  await row.locator(byTestId('readonly-btn')).click();
  await row.locator(byTestId('badge-readonly')).waitFor();
  assert.equal((await partitionInfo('orders')).readonly, true);
  await row.locator(byTestId('readonly-btn')).click();
  await row.locator(byTestId('badge-active')).waitFor();
  assert.equal((await partitionInfo('orders')).readonly, false);
  await shot(page, 'streams');
});

uiTest('a partition whose ISR is below its minimum is shown under-replicated', async () => {
  // One node: an ISR of one is below a minimum of two, so nothing commits.
  const r = await server.api('POST', '/api/v1/streams', { name: 'thin', subject: 'thin', min_isr: 2 });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  assert.equal((await partitionInfo('thin')).under_replicated, true);
  assert.equal((await partitionInfo('orders')).under_replicated, false);
  await page.goto(server.base + '/#/streams/thin');
  await page.locator(`${byTestId('partition-row')} ${byTestId('badge-under-replicated')}`).waitFor();
  await page.goto(server.base + '/#/streams/orders');
  await page.locator(byTestId('partition-row')).first().waitFor();
  assert.equal(await page.locator(byTestId('badge-under-replicated')).count(), 0);
  await page.goto(server.base + '/#/streams/thin/partitions/0');
  await page.locator(`${byTestId('part-isr')} ${byTestId('badge-under-replicated')}`).waitFor();
  assert.equal(await page.locator(byTestId('part-role')).textContent(), 'leader');
  assert.equal((await server.api('DELETE', '/api/v1/streams/thin')).status, 200);
  await page.click(byTestId('nav-streams'));
  await page.locator(byTestId('streams-refresh')).waitFor();
});

uiTest('a partition whose log file was lost is shown failed with the reason', async () => {
  // A server of its own: its data is damaged while it is stopped.
  const own = await new Server().start();
  try {
    const r = await own.api('POST', '/api/v1/streams', { name: 'hurt', subject: 'hurt' });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const m = await own.api('POST', '/api/v1/streams/hurt/partitions/0/messages', { value: 'x' });
    assert.ok(m.status < 300, JSON.stringify(m.body));
    await own.stop(true);
    fs.writeFileSync(path.join(own.dir, 'data', 'streams', 'hurt', '0', 'log.redb'), '');
    own.output = '';
    await own.start({ degraded: true });
    const health = await own.api('GET', '/api/v1/health');
    assert.equal(health.status, 503, JSON.stringify(health.body));
    assert.equal(health.body.degraded[0].stream, 'hurt', JSON.stringify(health.body));
    assert.match((await own.api('GET', '/api/v1/streams/hurt/partitions/0')).body.failed || '', /log\.redb/);
    await page.goto(own.base + '/#/streams/hurt');
    const badge = page.locator(`${byTestId('partition-row')} ${byTestId('badge-failed')}`);
    await badge.waitFor();
    assert.match(await badge.getAttribute('title'), /empty/);
    await page.goto(own.base + '/#/streams/hurt/partitions/0');
    await page.locator(`${byTestId('partition-state')} ${byTestId('badge-failed')}`).waitFor();
    assert.match(await page.locator(byTestId('part-failed')).textContent(), /log\.redb/);
    // Reading its messages says why it cannot be read.
    const read = await own.api('GET', '/api/v1/streams/hurt/partitions/0/messages');
    assert.equal(read.status, 409, JSON.stringify(read.body));
    assert.match(read.body.error, /failed: .*log\.redb/);
    await shot(page, 'partition-failed');
  } finally {
    await own.stop();
  }
  await page.goto(server.base + '/#/streams');
});

uiTest('deleting a stream asks first', async () => {
  const r = await server.api('POST', '/api/v1/streams', { name: 'scratch', subject: 'scratch.x' });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  await page.click(byTestId('streams-refresh'));
  const row = streamRow('scratch');
  await row.waitFor();

  page.once('dialog', (d) => d.dismiss());
  await row.locator(byTestId('delete-btn')).click();
  await sleep(500);
  assert.equal((await server.api('GET', '/api/v1/streams/scratch')).status, 200);

  page.once('dialog', (d) => d.accept());
  await row.locator(byTestId('delete-btn')).click();
  await row.waitFor({ state: 'detached' });
  assert.equal((await server.api('GET', '/api/v1/streams/scratch')).status, 404);
});

uiTest('the connections view lists NATS clients and their subscriptions', async () => {
  nats.sub('ui.watch.>', '1');
  await nats.flush();
  await page.click(byTestId('nav-connections'));
  const row = page.locator(byTestId('conn-row')).filter({ hasText: 'ui-test-client' });
  await row.waitFor();
  assert.match(await row.locator(byTestId('conn-subs')).textContent(), /ui\.watch\.>/);
  assert.match(await row.textContent(), /node-raw 1\.0/);
  await shot(page, 'connections');
});

uiTest('a 390-px phone viewport never scrolls sideways', async () => {
  const ctx = await browser.newContext({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
  const phone = await ctx.newPage();
  phone.setDefaultTimeout(15000);
  watchErrors(phone);
  const overflow = () => phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  try {
    const views = [
      ['overview', '/#/', byTestId('info-version')],
      ['streams', '/#/streams', `${byTestId('stream-row')}[data-stream="orders"]`],
      ['stream', '/#/streams/orders', byTestId('partition-row')],
      ['partition', '/#/streams/orders/partitions/0', byTestId('part-hw')],
      ['connections', '/#/connections', byTestId('conn-row')],
    ];
    for (const [name, url, ready] of views) {
      await phone.goto(server.base + url);
      await phone.locator(ready).first().waitFor();
      if (name === 'partition') {
        await phone.selectOption(byTestId('page-size'), '20');
        await phone.click(byTestId('seek-btn'));
        await phone.locator(byTestId('message')).first().waitFor();
        await phone.click(byTestId('decode-hex'));
        // The hex dump narrows to fit the phone instead of scrolling.
        const clipped = await phone.locator(byTestId('message-value')).first()
          .evaluate((el) => el.scrollWidth - el.clientWidth);
        assert.ok(clipped <= 0, `hex dump overflows its box by ${clipped} px`);
      }
      assert.ok(await overflow() <= 0, `${name} overflows by ${await overflow()} px at 390 px`);
      await phone.screenshot({ path: path.join(ARTIFACTS, `phone-${name}.png`), fullPage: true });
    }
  } finally {
    await ctx.close();
  }
});

uiTest('with token auth the page asks for the token, keeps it, and signs out', async () => {
  const secured = await new Server('http.auth.token: ui-s3cret\n').start();
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 } });
  const p = await ctx.newPage();
  p.setDefaultTimeout(15000);
  watchErrors(p);
  try {
    assert.equal((await secured.api('GET', '/api/v1/info')).status, 401);
    await p.goto(secured.base + '/');
    const dialog = p.locator(byTestId('token-dialog'));
    await dialog.waitFor({ state: 'visible' });
    assert.equal(await p.locator(byTestId('info-version')).count(), 0);

    await p.fill(byTestId('token-input'), 'wrong');
    await p.click(byTestId('token-submit'));
    await p.locator(byTestId('token-why')).filter({ hasText: 'refused' }).waitFor();
    await dialog.waitFor({ state: 'visible' });
    await p.screenshot({ path: path.join(ARTIFACTS, 'token-dialog.png') });

    await p.fill(byTestId('token-input'), 'ui-s3cret');
    await p.click(byTestId('token-submit'));
    await dialog.waitFor({ state: 'hidden' });
    const info = (await secured.api('GET', '/api/v1/info', undefined, { authorization: 'Bearer ui-s3cret' })).body;
    await p.locator(byTestId('info-server-id')).filter({ hasText: info.server_id }).waitFor();
    assert.equal(await p.evaluate(() => localStorage.getItem('liftbridge.token')), 'ui-s3cret');

    // A reload keeps the token: no prompt.
    await p.reload();
    await p.locator(byTestId('info-server-id')).filter({ hasText: info.server_id }).waitFor();
    assert.equal(await dialog.isVisible(), false);

    await p.click(byTestId('forget-token'));
    await dialog.waitFor({ state: 'visible' });
    assert.equal(await p.evaluate(() => localStorage.getItem('liftbridge.token')), null);
  } finally {
    await ctx.close();
    await secured.stop();
  }
});

uiTest('no script errors or blocked resources on any page', async () => {
  assert.deepEqual(pageErrors, []);
});
