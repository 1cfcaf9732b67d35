// liftbridge admin UI: one page, hash routing, plain DOM.
//
// Everything comes from the admin JSON API (/api/v1/...). The page polls
// /api/v1/info every 2 s for the header and the overview charts; each view
// may add its own timers, which are cleared when the route changes. Views
// check a generation number before touching the DOM so a slow answer for a
// view the user already left is dropped. Elements carry data-testid
// attributes that the browser test relies on: keep them stable.
'use strict';

(() => {
  const TOKEN_KEY = 'liftbridge.token';
  const INFO_EVERY_MS = 2000;
  const HISTORY = 90; // samples kept for the charts (3 minutes at 2 s)
  const TAIL_EVERY_MS = 1000;
  const TAIL_KEEP = 500; // messages kept on screen while tailing
  const SHOW_BYTES = 64 * 1024; // longest value rendered in full

  const state = {
    info: null,
    history: [], // {t: ms, in_msgs, out_msgs, in_bytes, out_bytes}
    gen: 0, // bumped on every route change
    timers: [], // view timers, cleared on route change
    onInfo: null, // the current view's listener for new info
    tokenPromptOpen: false,
  };

  // ---------------------------------------------------------------- DOM helpers

  /** Creates an element: h('div', {class: 'x', testid: 'y', onclick: f}, child...). */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'testid') el.dataset.testid = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    return el;
  }

  const $ = (id) => document.getElementById(id);

  // ---------------------------------------------------------------- formatting

  const nf = new Intl.NumberFormat();
  function fmtNum(n) {
    return typeof n === 'number' && Number.isFinite(n) ? nf.format(n) : '—';
  }
  function fmtOffset(n) {
    return typeof n === 'number' && n >= 0 ? nf.format(n) : '—';
  }
  function fmtBytes(n) {
    if (typeof n !== 'number' || !Number.isFinite(n)) return '—';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    let v = n;
    while (Math.abs(v) >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + ' ' + units[i];
  }
  function fmtRate(n) {
    if (!Number.isFinite(n)) return '—';
    if (n >= 100) return nf.format(Math.round(n));
    return n.toFixed(n >= 10 ? 1 : 2).replace(/\.?0+$/, '') || '0';
  }
  function fmtDuration(ms) {
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return '—';
    let s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400);
    s -= d * 86400;
    const hh = Math.floor(s / 3600);
    s -= hh * 3600;
    const mm = Math.floor(s / 60);
    s -= mm * 60;
    // The two most significant non-zero units: "2h", "1d 3h", "4m 10s".
    const parts = [[d, 'd'], [hh, 'h'], [mm, 'm'], [s, 's']];
    const first = parts.findIndex(([v]) => v > 0);
    if (first < 0) return ms > 0 ? `${ms}ms` : '0s';
    return parts.slice(first, first + 2).filter(([v]) => v > 0).map(([v, u]) => `${v}${u}`).join(' ');
  }
  /** Nanoseconds since the epoch (as a JSON number) to a local time string. */
  function fmtNs(ns) {
    if (typeof ns !== 'number' || ns <= 0) return '—';
    const d = new Date(Math.floor(ns / 1e6));
    if (Number.isNaN(d.getTime())) return '—';
    const pad = (x, n = 2) => String(x).padStart(n, '0');
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }
  function fmtList(a) {
    return Array.isArray(a) && a.length ? a.join(', ') : '—';
  }
  function yesNo(b) {
    return b ? 'yes' : 'no';
  }

  // ---------------------------------------------------------------- bytes and decoding

  function b64ToBytes(b64) {
    if (!b64) return new Uint8Array(0);
    try {
      const bin = atob(b64);
      const out = new Uint8Array(bin.length);
      for (let i = 0; i < bin.length; i += 1) out[i] = bin.charCodeAt(i);
      return out;
    } catch {
      return null;
    }
  }

  function utf8(bytes) {
    try {
      return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    } catch {
      return null;
    }
  }

  function bytesToB64(bytes) {
    let bin = '';
    for (const b of bytes) bin += String.fromCharCode(b);
    return btoa(bin);
  }

  /** Bytes per hex-dump line: 8 where 16 would not fit (phones). */
  const hexWidth = () => (window.matchMedia('(max-width: 560px)').matches ? 8 : 16);

  /** A classic hex dump: offset, `width` bytes in hex, printable ASCII. */
  function hexDump(bytes, width = hexWidth()) {
    const lines = [];
    // Offsets as wide as the largest needs (at least 4 hex digits).
    const ow = Math.max(4, Math.max(0, bytes.length - 1).toString(16).length);
    for (let i = 0; i < bytes.length; i += width) {
      const row = bytes.subarray(i, i + width);
      const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
      const ascii = Array.from(row, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
      lines.push(`${i.toString(16).padStart(ow, '0')}  ${hex.padEnd(width * 3 - 1, ' ')}  ${ascii}`);
    }
    return lines.join('\n');
  }

  /**
   * Renders a value for display in `mode` ('text' | 'json' | 'hex').
   * Returns {text, hex: bool, note}.
   */
  function renderValue(bytes, utf8Text, mode) {
    if (bytes === null) return { text: '', hex: false, note: 'value is not valid base64' };
    const cut = bytes.length > SHOW_BYTES;
    const shown = cut ? bytes.subarray(0, SHOW_BYTES) : bytes;
    const cutNote = cut ? `showing the first ${fmtBytes(SHOW_BYTES)} of ${fmtBytes(bytes.length)}` : '';
    if (mode === 'hex') return { text: hexDump(shown), hex: true, note: cutNote };
    const text = typeof utf8Text === 'string' ? utf8Text : utf8(bytes);
    if (text === null) {
      return { text: hexDump(shown), hex: true, note: join('not valid UTF-8, shown as hex', cutNote) };
    }
    if (mode === 'json') {
      try {
        return { text: JSON.stringify(JSON.parse(text), null, 2), hex: false, note: '' };
      } catch {
        return { text: clip(text), hex: false, note: join('not JSON, shown as text', cutNote) };
      }
    }
    return { text: clip(text), hex: false, note: cutNote };
  }
  function clip(s) {
    return s.length > SHOW_BYTES ? s.slice(0, SHOW_BYTES) : s;
  }
  function join(...parts) {
    return parts.filter(Boolean).join('; ');
  }

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function token() {
    try {
      return localStorage.getItem(TOKEN_KEY) || '';
    } catch {
      return '';
    }
  }

  /** Calls the admin API; resolves to parsed JSON or throws ApiError. */
  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, `cannot reach the server (${e.message})`);
    }
    const text = await resp.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (resp.status === 401) {
      // A Bearer challenge means a token helps; a Basic-only one is answered
      // by the browser's own prompt on the next page load.
      const challenge = resp.headers.get('www-authenticate') || '';
      if (/bearer/i.test(challenge) || !challenge) askForToken(t ? 'The stored token was refused.' : '');
      const msg = (data && data.error) || 'authentication required';
      throw new ApiError(401, /bearer/i.test(challenge) ? msg : `${msg}: reload the page to sign in`);
    }
    if (!resp.ok) {
      const msg = (data && data.error) || resp.statusText || 'request failed';
      throw new ApiError(resp.status, msg);
    }
    return data;
  }

  const enc = encodeURIComponent;
  const streamPath = (name) => `/api/v1/streams/${enc(name)}`;
  const partitionPath = (name, id) => `${streamPath(name)}/partitions/${enc(id)}`;

  // ---------------------------------------------------------------- banner, notice, token

  let bannerSource = '';
  function showError(err, source = 'action') {
    // The sign-in dialog already says it.
    if (err instanceof ApiError && err.status === 401 && state.tokenPromptOpen) return;
    const status = err instanceof ApiError && err.status ? `${err.status}: ` : '';
    $('banner-text').textContent = status + (err && err.message ? err.message : String(err));
    $('banner').classList.remove('hidden');
    bannerSource = source;
  }
  function clearError(source) {
    if (source === undefined || bannerSource === source) {
      $('banner').classList.add('hidden');
      bannerSource = '';
    }
  }

  let noticeTimer = 0;
  function notice(text) {
    const n = $('notice');
    n.textContent = text;
    n.classList.remove('hidden');
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => n.classList.add('hidden'), 4000);
  }

  function askForToken(why) {
    if (state.tokenPromptOpen) return;
    state.tokenPromptOpen = true;
    const d = $('token-dialog');
    $('token-why').textContent = why || '';
    $('token-why').classList.toggle('hidden', !why);
    $('token-input').value = '';
    if (typeof d.showModal === 'function') {
      if (!d.open) d.showModal();
    } else {
      d.setAttribute('open', '');
    }
  }

  function setupToken() {
    const d = $('token-dialog');
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = $('token-input').value.trim();
      if (!v) return;
      try {
        localStorage.setItem(TOKEN_KEY, v);
      } catch {
        showError(new Error('cannot store the token in this browser'));
      }
      state.tokenPromptOpen = false;
      if (d.open) d.close();
      updateForget();
      clearError();
      pollInfo();
      route();
    });
    d.addEventListener('cancel', () => {
      state.tokenPromptOpen = false;
    });
    $('forget-token').addEventListener('click', () => {
      try {
        localStorage.removeItem(TOKEN_KEY);
      } catch {
        /* nothing stored */
      }
      updateForget();
      route();
    });
    updateForget();
  }
  function updateForget() {
    $('forget-token').classList.toggle('hidden', !token());
  }

  // ---------------------------------------------------------------- info polling

  async function pollInfo() {
    let info;
    try {
      info = await api('GET', '/api/v1/info');
    } catch (e) {
      $('status-dot').className = 'dot down';
      $('status-text').textContent = e.status === 401 ? 'signed out' : 'unreachable';
      if (e.status !== 401) showError(e, 'poll');
      return;
    }
    clearError('poll');
    state.info = info;
    const n = info.nats || {};
    state.history.push({
      t: Date.now(),
      in_msgs: n.in_msgs || 0,
      out_msgs: n.out_msgs || 0,
      in_bytes: n.in_bytes || 0,
      out_bytes: n.out_bytes || 0,
    });
    if (state.history.length > HISTORY + 1) state.history.splice(0, state.history.length - HISTORY - 1);
    $('status-dot').className = 'dot up';
    // Version first: on a phone the line is cut at the end.
    $('status-text').textContent = `v${info.version || '?'} · ${info.server_id || '?'}`;
    if (state.onInfo) state.onInfo(info);
  }

  /** Per-second rates between consecutive samples of `key`. */
  function rates(key) {
    const out = [];
    for (let i = 1; i < state.history.length; i += 1) {
      const a = state.history[i - 1];
      const b = state.history[i];
      const dt = (b.t - a.t) / 1000;
      const dv = b[key] - a[key];
      out.push(dt > 0 && dv >= 0 ? dv / dt : 0);
    }
    return out;
  }

  // ---------------------------------------------------------------- routing

  /** Runs `f` every `ms` while this view is shown and the tab is visible. */
  function every(ms, f) {
    state.timers.push(setInterval(() => {
      if (!document.hidden) f();
    }, ms));
  }

  function clearView() {
    for (const t of state.timers) clearInterval(t);
    state.timers = [];
    state.onInfo = null;
    state.gen += 1;
    const main = $('view');
    main.replaceChildren();
    return { main, gen: state.gen };
  }

  const live = (gen) => gen === state.gen;

  function route() {
    const hash = location.hash.replace(/^#/, '') || '/';
    const parts = hash.split('/').filter(Boolean).map((p) => {
      try {
        return decodeURIComponent(p);
      } catch {
        return p;
      }
    });
    const ctx = clearView();
    let section = 'overview';
    if (parts.length === 0 || parts[0] === 'overview') {
      viewOverview(ctx);
    } else if (parts[0] === 'streams' && parts.length === 1) {
      section = 'streams';
      viewStreams(ctx);
    } else if (parts[0] === 'streams' && parts.length === 2) {
      section = 'streams';
      viewStream(ctx, parts[1]);
    } else if (parts[0] === 'streams' && parts.length === 4 && parts[2] === 'partitions') {
      section = 'streams';
      viewPartition(ctx, parts[1], parts[3]);
    } else if (parts[0] === 'connections') {
      section = 'connections';
      viewConnections(ctx);
    } else {
      section = '';
      ctx.main.append(h('div', { class: 'panel', testid: 'not-found' },
        h('h1', {}, 'Not found'), h('p', {}, 'No such page. ', h('a', { href: '#/' }, 'Back to the overview'))));
    }
    for (const a of document.querySelectorAll('.nav a')) {
      a.classList.toggle('active', a.dataset.section === section);
    }
  }

  // Hash links built from stream names: each segment percent-encoded so a
  // name containing '/' or '#' still routes.
  const streamHref = (name) => `#/streams/${enc(name)}`;
  const partitionHref = (name, id) => `#/streams/${enc(name)}/partitions/${enc(id)}`;

  // ---------------------------------------------------------------- overview

  function card(label, testid, value, small) {
    return h('div', { class: 'card' },
      h('div', { class: 'label' }, label),
      h('div', { class: small ? 'value small' : 'value', testid }, value));
  }

  /** A small line chart of `values` drawn as SVG (no library). */
  function lineChart(values, kind) {
    const W = 300;
    const H = 80;
    const el = svg('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img' });
    for (const y of [H * 0.25, H * 0.5, H * 0.75]) {
      el.append(svg('line', { x1: 0, x2: W, y1: y, y2: y, class: 'grid', 'stroke-width': 0.5, 'vector-effect': 'non-scaling-stroke' }));
    }
    const max = Math.max(1, ...values);
    if (values.length >= 1) {
      const n = Math.max(values.length - 1, 1);
      const pts = values.map((v, i) => {
        const x = values.length === 1 ? W : (i / n) * W;
        const y = H - 2 - (v / max) * (H - 6);
        return [x, y];
      });
      if (pts.length === 1) pts.unshift([0, pts[0][1]]);
      const line = pts.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(' ');
      el.append(svg('polygon', { points: `0,${H} ${line} ${W},${H}`, class: `area-${kind}` }));
      el.append(svg('polyline', {
        points: line, class: `line-${kind}`, fill: 'none', 'stroke-width': 2,
        'vector-effect': 'non-scaling-stroke', 'stroke-linejoin': 'round',
      }));
    }
    return { el, max };
  }

  function chartPanel(title, testid, kind, msgKey, byteKey) {
    const rateEl = h('span', { class: 'rate', testid: `rate-${kind}` }, '—');
    const bytesEl = h('span', { class: 'muted' });
    const holder = h('div', { testid });
    const maxEl = h('span');
    const panel = h('div', { class: 'panel chart' },
      h('div', { class: 'head' }, h('h3', {}, title), rateEl),
      holder,
      h('div', { class: 'axis' }, h('span', {}, `last ${(HISTORY * INFO_EVERY_MS) / 60000} min`), maxEl),
      h('div', { class: 'axis' }, bytesEl));
    function update() {
      const r = rates(msgKey);
      const b = rates(byteKey);
      const { el, max } = lineChart(r.slice(-HISTORY), kind);
      holder.replaceChildren(el);
      holder.dataset.points = String(r.length);
      rateEl.textContent = r.length ? `${fmtRate(r[r.length - 1])} msg/s` : '— msg/s';
      bytesEl.textContent = b.length ? `${fmtBytes(Math.round(b[b.length - 1]))}/s` : '';
      maxEl.textContent = `peak ${fmtRate(max)} msg/s`;
    }
    return { panel, update };
  }

  /** The metadata group (controller, members) and this node's NATS routes. */
  function renderCluster(panel, info) {
    const c = info.cluster || {};
    const nodes = c.nodes || [];
    const routes = (info.nats && info.nats.routes) || [];
    const role = c.role ? String(c.role).toLowerCase() : '—';
    const td = (label, cls, ...c) => h('td', { 'data-label': label, class: cls }, ...c);
    const rows = nodes.map((n) => {
      const me = n.server_id === info.server_id;
      const ctrl = n.server_id === c.controller;
      return h('tr', { testid: 'cluster-node' },
        td('Server', 'mono', h('span', { testid: 'cluster-node-id' }, n.server_id), me ? ' (this node)' : ''),
        td('Role', '', ctrl ? h('span', { class: 'badge active', testid: 'cluster-controller' }, 'controller')
          : (n.voter ? 'voter' : 'learner')),
        td('gRPC', 'mono', n.host && n.port ? `${n.host}:${n.port}` : '—'),
        td('NATS', 'mono', n.nats_addr || '—'),
        td('HTTP', 'mono', n.http_addr ? h('a', { href: `http://${n.http_addr}/` }, n.http_addr) : '—'));
    });
    const routeRows = routes.map((r) => h('tr', { testid: 'cluster-route' },
      td('Peer', 'mono', r.remote_name || r.remote_id || '—'),
      td('Address', 'mono', `${r.ip}:${r.port}`),
      td('Direction', '', r.did_solicit ? 'outbound' : 'inbound'),
      td('Msgs in', 'num', fmtNum(r.in_msgs)),
      td('Msgs out', 'num', fmtNum(r.out_msgs))));
    panel.replaceChildren(
      h('h2', {}, 'Cluster'),
      h('p', { class: 'muted', testid: 'cluster-summary' },
        `${nodes.length} node${nodes.length === 1 ? '' : 's'} · this node is ${role} · controller ${c.controller || 'unknown'}`),
      h('div', { class: 'table-wrap' }, h('table', { class: 'cards-sm', testid: 'cluster-nodes' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Server'), h('th', {}, 'Role'), h('th', {}, 'gRPC'), h('th', {}, 'NATS'), h('th', {}, 'HTTP'))),
        h('tbody', {}, ...rows))),
      h('h3', {}, 'NATS routes'),
      routeRows.length
        ? h('div', { class: 'table-wrap' }, h('table', { class: 'cards-sm', testid: 'cluster-routes' },
          h('thead', {}, h('tr', {}, h('th', {}, 'Peer'), h('th', {}, 'Address'), h('th', {}, 'Direction'), h('th', {}, 'Msgs in'), h('th', {}, 'Msgs out'))),
          h('tbody', {}, ...routeRows)))
        : h('p', { class: 'empty', testid: 'cluster-no-routes' }, 'No routes: this node is not meshed with others.'));
  }

  function viewOverview({ main, gen }) {
    const cards = h('div', { class: 'cards', testid: 'overview-cards' });
    const addrs = h('dl', { class: 'kv', testid: 'overview-addrs' });
    const inChart = chartPanel('Messages in', 'chart-in', 'in', 'in_msgs', 'in_bytes');
    const outChart = chartPanel('Messages out', 'chart-out', 'out', 'out_msgs', 'out_bytes');
    const clusterPanel = h('div', { class: 'panel', testid: 'cluster-panel' });
    main.append(
      h('h1', {}, 'Overview'),
      cards,
      h('div', { class: 'charts' }, inChart.panel, outChart.panel),
      h('div', { class: 'panel' }, h('h2', {}, 'Server'), addrs),
      clusterPanel);

    function render(info) {
      if (!live(gen)) return;
      const n = info.nats || {};
      cards.replaceChildren(
        card('Version', 'info-version', info.version || '—'),
        card('Server id', 'info-server-id', info.server_id || '—', true),
        card('Uptime', 'info-uptime', fmtDuration(info.uptime_ms)),
        card('NATS connections', 'info-connections', fmtNum(n.connections)),
        card('Streams', 'info-streams', fmtNum(info.streams)),
        card('Partitions', 'info-partitions', fmtNum(info.partitions)),
        card('Subscriptions', 'info-subscriptions', fmtNum(n.subscriptions)),
        card('Slow consumers', 'info-slow', fmtNum(n.slow_consumers)));
      const kv = (k, v, testid) => h('div', {}, h('dt', {}, k), h('dd', { testid }, v));
      addrs.replaceChildren(
        kv('gRPC', info.grpc_addr || '—', 'info-grpc'),
        // External NATS mode: the external servers and the connection state.
        kv('NATS', n.external
          ? `${info.nats_addr} (external, ${n.external.connected ? 'connected' : 'disconnected'})`
          : (info.nats_addr || '—'), 'info-nats'),
        kv('HTTP', info.http_addr || '—', 'info-http'),
        kv('Metadata leader', `${info.metadata_leader || '—'}${info.is_metadata_leader ? ' (this node)' : ''}`, 'info-leader'),
        kv('Started', fmtNs(info.start_time_ns)),
        kv('Total connections', fmtNum(n.total_connections)),
        kv('Messages in / out', `${fmtNum(n.in_msgs)} / ${fmtNum(n.out_msgs)}`),
        kv('Bytes in / out', `${fmtBytes(n.in_bytes)} / ${fmtBytes(n.out_bytes)}`));
      renderCluster(clusterPanel, info);
      inChart.update();
      outChart.update();
    }
    state.onInfo = render;
    if (state.info) render(state.info);
    else cards.append(h('p', { class: 'empty' }, 'Loading…'));
  }

  // ---------------------------------------------------------------- stream actions

  function partitionsSummary(s) {
    const ps = s.partitions || [];
    const paused = ps.filter((p) => p.paused).length;
    const readonly = ps.filter((p) => p.readonly).length;
    let newest = -1;
    let messages = 0;
    let bytes = 0;
    for (const p of ps) {
      if (typeof p.newest_offset === 'number' && p.newest_offset > newest) newest = p.newest_offset;
      messages += typeof p.messages === 'number' ? p.messages : 0;
      bytes += typeof p.bytes === 'number' ? p.bytes : 0;
    }
    const degraded = ps.filter((p) => p.degraded).map((p) => `#${p.id}: ${p.degraded}`);
    return { count: ps.length, paused, readonly, newest, messages, bytes, degraded };
  }

  function badges(paused, readonly, total) {
    const out = [];
    const part = (n) => (total > 1 && n < total ? ` ${n}/${total}` : '');
    if (paused > 0) out.push(h('span', { class: 'badge paused', testid: 'badge-paused' }, 'paused' + part(paused)));
    if (readonly > 0) out.push(h('span', { class: 'badge readonly', testid: 'badge-readonly' }, 'read-only' + part(readonly)));
    if (!out.length) out.push(h('span', { class: 'badge active', testid: 'badge-active' }, 'active'));
    return out;
  }

  /** A warning badge when the log refuses writes after an I/O failure (e.g. a full disk); the reason is its title. */
  function degradedBadge(reasons) {
    if (!reasons || !reasons.length) return [];
    return [' ', h('span', { class: 'badge degraded', testid: 'badge-degraded', title: `Writes are refused and retried every second; reads go on. ${reasons.join('; ')}` }, 'degraded: cannot write')];
  }

  /** A warning badge when a replica is out of the ISR or the ISR is below its minimum. */
  function underReplicated(p) {
    if (!p.under_replicated) return [];
    return [' ', h('span', { class: 'badge paused', testid: 'badge-under-replicated', title: 'A replica is out of the in-sync set, or the set is below its minimum (then nothing commits)' }, 'under-replicated')];
  }

  /** A red badge when the partition's files are lost or damaged; the reason is its title. */
  function failedBadge(p) {
    if (!p.failed) return [];
    return [' ', h('span', { class: 'badge failed', testid: 'badge-failed', title: p.failed }, 'failed')];
  }

  /** Pause / resume / read-only / delete buttons for a stream (or some of its partitions). */
  function actionButtons(name, sum, after, partitions) {
    const body = partitions ? { partitions } : {};
    const run = async (btn, what, f) => {
      btn.disabled = true;
      try {
        await f();
        notice(what);
        clearError('action');
      } catch (e) {
        showError(e);
      } finally {
        btn.disabled = false;
        after();
      }
    };
    const allPaused = sum.paused === sum.count && sum.count > 0;
    const anyReadonly = sum.readonly > 0;
    const buttons = [];
    if (!allPaused) {
      const b = h('button', { type: 'button', testid: 'pause-btn', title: 'Stop recording until resumed (or a message arrives)' }, 'Pause');
      b.addEventListener('click', () => run(b, `Paused ${name}`, () => api('POST', `${streamPath(name)}/pause`, body)));
      buttons.push(b);
    }
    if (sum.paused > 0) {
      const b = h('button', { type: 'button', testid: 'resume-btn' }, 'Resume');
      b.addEventListener('click', () => run(b, `Resumed ${name}`, () => api('POST', `${streamPath(name)}/resume`, body)));
      buttons.push(b);
    }
    const ro = h('button', { type: 'button', testid: 'readonly-btn', 'aria-pressed': anyReadonly ? 'true' : 'false' },
      anyReadonly ? 'Make writable' : 'Make read-only');
    ro.addEventListener('click', () => run(ro, anyReadonly ? `${name} is writable` : `${name} is read-only`,
      () => api('POST', `${streamPath(name)}/readonly`, { ...body, readonly: !anyReadonly })));
    buttons.push(ro);
    if (!partitions) {
      const del = h('button', { type: 'button', class: 'danger', testid: 'delete-btn' }, 'Delete');
      del.addEventListener('click', () => {
        if (!window.confirm(`Delete stream "${name}" and all its messages? This cannot be undone.`)) return;
        run(del, `Deleted ${name}`, () => api('DELETE', streamPath(name)));
      });
      buttons.push(del);
    }
    return h('div', { class: 'actions' }, buttons);
  }

  // ---------------------------------------------------------------- streams list

  function viewStreams({ main, gen }) {
    const tbody = h('tbody', { testid: 'streams-body' });
    const table = h('table', { class: 'cards-sm', testid: 'streams-table' },
      h('thead', {}, h('tr', {},
        h('th', {}, 'Name'), h('th', {}, 'Subject'), h('th', { class: 'num' }, 'Partitions'),
        h('th', { class: 'num' }, 'Newest offset'), h('th', { class: 'num' }, 'Messages'),
        h('th', { class: 'num' }, 'Size'), h('th', {}, 'State'), h('th', {}, 'Actions'))),
      tbody);
    const emptyEl = h('p', { class: 'empty hidden', testid: 'streams-empty' }, 'No streams yet: create one below.');
    main.append(
      h('div', { class: 'title-row' }, h('h1', {}, 'Streams'),
        h('button', { type: 'button', testid: 'streams-refresh', onclick: () => load() }, 'Refresh')),
      h('div', { class: 'panel' }, h('div', { class: 'table-wrap' }, table), emptyEl),
      createForm(() => load()));

    async function load() {
      let data;
      try {
        data = await api('GET', '/api/v1/streams');
      } catch (e) {
        if (live(gen)) showError(e, 'load');
        return;
      }
      if (!live(gen)) return;
      clearError('load');
      const streams = (data && data.streams) || [];
      emptyEl.classList.toggle('hidden', streams.length > 0);
      table.classList.toggle('hidden', streams.length === 0);
      tbody.replaceChildren(...streams.map((s) => {
        const sum = partitionsSummary(s);
        const td = (label, cls, ...c) => h('td', { 'data-label': label, class: cls }, ...c);
        return h('tr', { testid: 'stream-row', dataset: { stream: s.name } },
          td('Name', '', h('span', {}, h('a', { href: streamHref(s.name), testid: 'stream-link' }, s.name),
            // Liftbridge's own streams (cursors) start with "__".
            s.name.startsWith('__') ? [' ', h('span', { class: 'badge internal', title: 'used by the server itself' }, 'internal')] : null)),
          td('Subject', 'mono', s.subject),
          td('Partitions', 'num', fmtNum(sum.count)),
          td('Newest offset', 'num', h('span', { testid: 'stream-newest' }, fmtOffset(sum.newest))),
          td('Messages', 'num', h('span', { testid: 'stream-messages' }, fmtNum(sum.messages))),
          td('Size', 'num', fmtBytes(sum.bytes)),
          td('State', '', h('span', { testid: 'stream-state' }, badges(sum.paused, sum.readonly, sum.count)), ...degradedBadge(sum.degraded)),
          td('Actions', '', actionButtons(s.name, sum, load)));
      }));
    }
    load();
    every(3000, load);
  }

  const AGE_UNITS = { s: 1000, m: 60000, h: 3600000, d: 86400000 };

  function createForm(after) {
    const num = (name, label, testid, attrs) => h('label', {}, label,
      h('input', { type: 'number', name, min: 0, step: 1, inputmode: 'numeric', testid, ...attrs }));
    const ageUnit = h('select', { name: 'retention_age_unit', testid: 'create-retention-age-unit', 'aria-label': 'unit' },
      h('option', { value: 'm' }, 'minutes'), h('option', { value: 'h', selected: true }, 'hours'),
      h('option', { value: 'd' }, 'days'), h('option', { value: 's' }, 'seconds'));
    const form = h('form', { class: 'panel', testid: 'create-stream-form', autocomplete: 'off' },
      h('h2', {}, 'Create a stream'),
      h('div', { class: 'form-grid' },
        h('label', {}, 'Name', h('input', { name: 'name', required: true, testid: 'create-name', placeholder: 'e.g. orders' })),
        h('label', {}, 'Subject', h('input', { name: 'subject', required: true, testid: 'create-subject', placeholder: 'e.g. orders.>' })),
        num('partitions', 'Partitions', 'create-partitions', { min: 1, value: 1 }),
        num('replication_factor', 'Replication factor', 'create-replication', { min: -1, value: 1 }),
        h('label', {}, 'Group (optional)', h('input', { name: 'group', testid: 'create-group' }))),
      h('details', {},
        h('summary', {}, 'Retention and more'),
        h('div', { class: 'form-grid' },
          num('retention_max_bytes', 'Max bytes', 'create-retention-bytes'),
          num('retention_max_messages', 'Max messages', 'create-retention-messages'),
          h('label', {}, 'Max age',
            h('span', { class: 'inline' },
              h('input', { type: 'number', name: 'retention_age', min: 0, step: 'any', testid: 'create-retention-age' }),
              ageUnit)),
          num('segment_max_bytes', 'Segment max bytes', 'create-segment-bytes'),
          num('min_isr', 'Min ISR', 'create-min-isr'),
          h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'compact_enabled', testid: 'create-compact' }), 'Compaction'),
          h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'optimistic_concurrency_control', testid: 'create-occ' }), 'Optimistic concurrency'))),
      h('div', { class: 'row end' }, h('button', { type: 'submit', class: 'primary', testid: 'create-submit' }, 'Create stream')));

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const f = new FormData(form);
      const str = (k) => String(f.get(k) || '').trim();
      const int = (k) => {
        const v = str(k);
        return v === '' ? undefined : Number.parseInt(v, 10);
      };
      const body = { name: str('name'), subject: str('subject') };
      if (str('group')) body.group = str('group');
      for (const k of ['partitions', 'replication_factor', 'retention_max_bytes', 'retention_max_messages', 'segment_max_bytes', 'min_isr']) {
        const v = int(k);
        if (v !== undefined && Number.isFinite(v)) body[k] = v;
      }
      const age = str('retention_age');
      if (age !== '') {
        const n = Number(age);
        if (!Number.isFinite(n) || n < 0) {
          showError(new Error('max age must be a non-negative number'));
          return;
        }
        body.retention_max_age_ms = Math.round(n * AGE_UNITS[str('retention_age_unit')] || 0);
      }
      if (f.get('compact_enabled')) body.compact_enabled = true;
      if (f.get('optimistic_concurrency_control')) body.optimistic_concurrency_control = true;
      const btn = form.querySelector('button[type=submit]');
      btn.disabled = true;
      try {
        await api('POST', '/api/v1/streams', body);
        clearError('action');
        notice(`Created stream ${body.name}`);
        form.reset();
      } catch (e) {
        showError(e);
      } finally {
        btn.disabled = false;
        after();
      }
    });
    return form;
  }

  // ---------------------------------------------------------------- one stream

  function viewStream({ main, gen }, name) {
    const head = h('div');
    const tbody = h('tbody', { testid: 'partitions-body' });
    main.append(
      h('div', { class: 'crumbs' }, h('a', { href: '#/streams' }, 'Streams'), ' / ', name),
      head,
      h('div', { class: 'panel' }, h('h2', {}, 'Partitions'),
        h('div', { class: 'table-wrap' }, h('table', { class: 'cards-sm', testid: 'partitions-table' },
          h('thead', {}, h('tr', {},
            h('th', {}, 'Id'), h('th', {}, 'Leader'), h('th', {}, 'Replicas'), h('th', {}, 'ISR'),
            h('th', { class: 'num' }, 'Oldest'), h('th', { class: 'num' }, 'Newest'), h('th', { class: 'num' }, 'HW'),
            h('th', { class: 'num' }, 'Messages'), h('th', { class: 'num' }, 'Size'), h('th', {}, 'State'))),
          tbody))));

    async function load() {
      let s;
      try {
        s = await api('GET', streamPath(name));
      } catch (e) {
        if (!live(gen)) return;
        if (e.status === 404) {
          head.replaceChildren(h('div', { class: 'panel', testid: 'stream-missing' },
            h('h1', {}, name), h('p', {}, 'This stream does not exist (any more). ', h('a', { href: '#/streams' }, 'All streams'))));
          tbody.replaceChildren();
          return;
        }
        showError(e, 'load');
        return;
      }
      if (!live(gen)) return;
      clearError('load');
      const sum = partitionsSummary(s);
      head.replaceChildren(
        h('div', { class: 'title-row' },
          h('h1', { testid: 'stream-name' }, s.name),
          h('span', { testid: 'stream-state' }, badges(sum.paused, sum.readonly, sum.count)), ...degradedBadge(sum.degraded)),
        h('div', { class: 'panel' },
          h('dl', { class: 'kv' },
            h('div', {}, h('dt', {}, 'Subject'), h('dd', { class: 'mono', testid: 'stream-subject' }, s.subject)),
            h('div', {}, h('dt', {}, 'Group'), h('dd', {}, s.group || '—')),
            h('div', {}, h('dt', {}, 'Created'), h('dd', {}, fmtNs(s.creation_timestamp_ns))),
            h('div', {}, h('dt', {}, 'Messages'), h('dd', {}, fmtNum(sum.messages))),
            h('div', {}, h('dt', {}, 'Size'), h('dd', {}, fmtBytes(sum.bytes)))),
          h('div', { class: 'row' }, actionButtons(s.name, sum, () => {
            if (location.hash.startsWith(streamHref(s.name))) load();
          }))));
      tbody.replaceChildren(...(s.partitions || []).map((p) => {
        const td = (label, cls, ...c) => h('td', { 'data-label': label, class: cls }, ...c);
        return h('tr', { testid: 'partition-row', dataset: { partition: String(p.id) } },
          td('Id', '', h('a', { href: partitionHref(s.name, p.id), testid: 'partition-link' }, `#${p.id}`)),
          td('Leader', 'mono', p.leader || '—'),
          td('Replicas', 'mono', fmtList(p.replicas)),
          td('ISR', 'mono', fmtList(p.isr), ...underReplicated(p)),
          td('Oldest', 'num', fmtOffset(p.oldest_offset)),
          td('Newest', 'num', fmtOffset(p.newest_offset)),
          td('HW', 'num', fmtOffset(p.high_watermark)),
          td('Messages', 'num', fmtNum(p.messages)),
          td('Size', 'num', fmtBytes(p.bytes)),
          td('State', '', badges(p.paused ? 1 : 0, p.readonly ? 1 : 0, 1), ...degradedBadge(p.degraded ? [p.degraded] : []), ...failedBadge(p)));
      }));
    }
    load();
    every(3000, load);
  }

  // ---------------------------------------------------------------- one partition

  /** `Date` → value of an <input type=datetime-local> (local time, seconds). */
  function toLocalInput(d) {
    const pad = (x) => String(x).padStart(2, '0');
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function viewPartition({ main, gen }, name, id) {
    const details = h('div', { testid: 'partition-details' }, h('p', { class: 'empty' }, 'Loading…'));
    const actions = h('div', { class: 'row' });
    main.append(
      h('div', { class: 'crumbs' },
        h('a', { href: '#/streams' }, 'Streams'), ' / ', h('a', { href: streamHref(name) }, name), ' / ', `partition ${id}`),
      h('div', { class: 'title-row' },
        h('h1', { testid: 'partition-title' }, `${name} · partition ${id}`),
        h('span', { testid: 'partition-state' })),
      h('div', { class: 'panel' }, details, actions));

    async function load() {
      let p;
      try {
        p = await api('GET', partitionPath(name, id));
      } catch (e) {
        if (!live(gen)) return;
        if (e.status === 404) {
          details.replaceChildren(h('p', { testid: 'partition-missing' }, 'No such partition. ', h('a', { href: streamHref(name) }, 'Back to the stream')));
          return;
        }
        showError(e, 'load');
        return;
      }
      if (!live(gen)) return;
      clearError('load');
      renderDetails(p);
    }

    function renderDetails(p) {
      const kv = (k, v, testid) => h('div', {}, h('dt', {}, k), h('dd', { testid }, v));
      const when = (flag, ns) => (flag ? `yes, since ${fmtNs(ns)}` : 'no');
      const rx = p.message_received_timestamp_ns || {};
      const c = p.config || {};
      // null: neither the stream nor the server sets it; 0: no limit.
      const unset = (v) => v === null || v === undefined;
      const dur = (ms) => (unset(ms) ? 'default' : ms > 0 ? fmtDuration(ms) : 'unlimited');
      const lim = (n, f) => (unset(n) ? 'default' : n > 0 ? f(n) : 'unlimited');
      main.querySelector('[data-testid=partition-state]').replaceChildren(...badges(p.paused ? 1 : 0, p.readonly ? 1 : 0, 1), ...degradedBadge(p.degraded ? [p.degraded] : []), ...failedBadge(p));
      details.replaceChildren(
        h('dl', { class: 'kv' },
          ...(p.failed ? [kv('Failed', p.failed, 'part-failed')] : []),
          kv('Leader', p.leader || '—', 'part-leader'),
          kv('Replicas', fmtList(p.replicas), 'part-replicas'),
          kv('ISR', [fmtList(p.isr), ...underReplicated(p)], 'part-isr'),
          kv('Epoch / leader epoch', `${fmtNum(p.epoch)} / ${fmtNum(p.leader_epoch)}`, 'part-epochs'),
          kv('This node', p.role || '—', 'part-role'),
          kv('High watermark', fmtOffset(p.high_watermark), 'part-hw'),
          kv('Log end offset', fmtOffset(p.log_end_offset), 'part-leo'),
          kv('Newest offset', fmtOffset(p.newest_offset), 'part-newest'),
          kv('Oldest offset', fmtOffset(p.oldest_offset), 'part-oldest'),
          kv('Messages', fmtNum(p.messages), 'part-messages'),
          kv('Size (disk)', `${fmtBytes(p.bytes)} (${fmtBytes(p.disk_bytes)})`, 'part-bytes'),
          kv('Paused', when(p.paused, p.paused_timestamp_ns), 'part-paused'),
          kv('Read-only', when(p.readonly, p.readonly_timestamp_ns), 'part-readonly'),
          kv('Writes', p.degraded ? `refused (retried every second): ${p.degraded}` : 'accepted', 'part-degraded'),
          kv('First / latest received', `${fmtNs(rx.first)} / ${fmtNs(rx.latest)}`, 'part-received'),
          kv('Subscribers', fmtNum(p.subscribers), 'part-subscribers'),
          kv('Recorder backlog', p.recorder
            ? `${fmtBytes(p.recorder.pending_bytes)} in ${fmtNum(p.recorder.pending_msgs)} msgs (max ${fmtBytes(p.recorder.pending_bytes_max)} of ${fmtBytes(p.recorder.limit_bytes)}); publishers stalled ${p.recorder.stall_seconds.toFixed(1)} s`
            : '—', 'part-recorder')),
        h('h3', {}, 'Retention and settings'),
        h('dl', { class: 'kv', testid: 'part-config' },
          kv('Max bytes', lim(c.retention_max_bytes, fmtBytes)),
          kv('Max messages', lim(c.retention_max_messages, fmtNum)),
          kv('Max age', dur(c.retention_max_age_ms)),
          kv('Cleaner interval', dur(c.cleaner_interval_ms)),
          kv('Segment max bytes', lim(c.segment_max_bytes, fmtBytes)),
          kv('Segment max age', dur(c.segment_max_age_ms)),
          kv('Compaction', yesNo(c.compact_enabled)),
          kv('Auto-pause after', dur(c.auto_pause_time_ms)),
          kv('Auto-pause off with subscribers', yesNo(c.auto_pause_disable_if_subscribers)),
          kv('Min ISR', unset(c.min_isr) ? 'default' : fmtNum(c.min_isr)),
          kv('Optimistic concurrency', yesNo(c.optimistic_concurrency_control))));
      const sum = { count: 1, paused: p.paused ? 1 : 0, readonly: p.readonly ? 1 : 0 };
      const pid = Number.parseInt(id, 10);
      actions.replaceChildren(actionButtons(name, sum, load, [pid]));
    }

    load();
    every(3000, load);
    main.append(messageBrowser(name, id, gen, load), publishForm(name, id, load));
  }

  function messageBrowser(name, id, gen, onChange) {
    // seq numbers page loads: only the newest request's answer is shown, so
    // a click while a load is under way is never lost. tailBusy keeps one
    // tail request in flight at a time.
    const b = { mode: 'text', next: null, tailing: false, tailBusy: false, seq: 0, shown: [] };
    const seek = h('select', { testid: 'seek-mode', 'aria-label': 'start at' },
      h('option', { value: 'oldest' }, 'oldest'), h('option', { value: 'offset' }, 'offset'),
      h('option', { value: 'time' }, 'time'), h('option', { value: 'latest' }, 'latest'));
    const offsetIn = h('input', { type: 'number', min: 0, step: 1, testid: 'seek-offset', placeholder: '0', inputmode: 'numeric' });
    const timeIn = h('input', { type: 'datetime-local', step: 1, testid: 'seek-time', value: toLocalInput(new Date(Date.now() - 3600000)) });
    const limit = h('select', { testid: 'page-size', 'aria-label': 'page size' },
      ...[20, 50, 100, 500].map((n) => h('option', { value: n, selected: n === 50 }, String(n))));
    const loadBtn = h('button', { type: 'submit', class: 'primary', testid: 'seek-btn' }, 'Load');
    const nextBtn = h('button', { type: 'button', testid: 'next-btn', disabled: true }, 'Next page');
    const tail = h('input', { type: 'checkbox', testid: 'live-tail' });
    const modes = [['text', 'UTF-8'], ['json', 'JSON'], ['hex', 'Hex']].map(([m, label]) =>
      h('button', { type: 'button', testid: `decode-${m}`, 'aria-pressed': m === b.mode ? 'true' : 'false', dataset: { mode: m } }, label));
    const status = h('div', { class: 'muted', testid: 'browser-status' }, 'Choose where to start and press Load.');
    const list = h('div', { class: 'messages', testid: 'message-list' });
    const offsetLabel = h('label', {}, 'Offset', offsetIn);
    const timeLabel = h('label', { class: 'hidden' }, 'From time', timeIn);

    const form = h('form', { class: 'toolbar', testid: 'seek-form' },
      h('label', {}, 'Start at', seek), offsetLabel, timeLabel,
      h('label', {}, 'Page size', limit),
      h('div', { class: 'group' }, loadBtn, nextBtn),
      h('div', { class: 'group segmented', role: 'group', 'aria-label': 'decode values as' }, modes),
      h('label', { class: 'check' }, tail, 'Live tail'));
    const panel = h('div', { class: 'panel', testid: 'message-browser' }, h('h2', {}, 'Messages'), form, status, list);

    function syncSeekInputs() {
      offsetLabel.classList.toggle('hidden', seek.value !== 'offset');
      timeLabel.classList.toggle('hidden', seek.value !== 'time');
    }
    seek.addEventListener('change', syncSeekInputs);
    offsetIn.addEventListener('input', () => {
      seek.value = 'offset';
      syncSeekInputs();
    });
    syncSeekInputs();

    for (const btn of modes) {
      btn.addEventListener('click', () => {
        b.mode = btn.dataset.mode;
        for (const o of modes) o.setAttribute('aria-pressed', o === btn ? 'true' : 'false');
        redraw();
      });
    }

    function query(extra) {
      const q = new URLSearchParams({ limit: limit.value, ...extra });
      return `${partitionPath(name, id)}/messages?${q}`;
    }

    async function fetchPage(extra) {
      const data = await api('GET', query(extra));
      return {
        messages: (data && data.messages) || [],
        next: data && typeof data.next_offset === 'number' ? data.next_offset : null,
        hw: data ? data.high_watermark : undefined,
        oldest: data ? data.oldest_offset : undefined,
      };
    }

    function seekParams() {
      switch (seek.value) {
        case 'offset': {
          const v = offsetIn.value.trim();
          if (!/^\d+$/.test(v)) throw new Error('enter an offset (a whole number ≥ 0)');
          return { offset: v };
        }
        case 'time': {
          const ms = new Date(timeIn.value).getTime();
          if (!timeIn.value || Number.isNaN(ms)) throw new Error('choose a date and time');
          // Nanoseconds as a decimal string: exact, unlike ms * 1e6 in a double.
          return { since_ns: `${Math.max(0, Math.floor(ms))}000000` };
        }
        case 'latest':
          return { from: 'latest' };
        default:
          return {};
      }
    }

    function describe(page) {
      const range = page.messages.length
        ? `offsets ${fmtNum(page.messages[0].offset)}–${fmtNum(page.messages[page.messages.length - 1].offset)}`
        : 'no messages here';
      return `${range} · oldest ${fmtOffset(page.oldest)} · high watermark ${fmtOffset(page.hw)}`;
    }

    async function loadPage(extra) {
      b.seq += 1;
      const seq = b.seq;
      try {
        const page = await fetchPage(extra);
        if (!live(gen) || seq !== b.seq) return;
        clearError('browse');
        b.shown = page.messages;
        b.next = page.next;
        nextBtn.disabled = b.next === null;
        status.textContent = describe(page);
        redraw();
        list.scrollTop = 0;
      } catch (e) {
        if (live(gen) && seq === b.seq) showError(e, 'browse');
      }
    }

    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      let params;
      try {
        params = seekParams();
      } catch (e) {
        showError(e, 'browse');
        return;
      }
      loadPage(params);
    });
    nextBtn.addEventListener('click', () => {
      if (b.next !== null) loadPage({ offset: String(b.next) });
    });

    let tailTimer = 0;
    async function tailOnce() {
      if (!b.tailing || b.tailBusy || !live(gen)) return;
      b.tailBusy = true;
      const seq = b.seq;
      try {
        const page = await fetchPage(b.next === null ? { from: 'latest' } : { offset: String(b.next) });
        // A page loaded meanwhile moved the position: this answer is stale.
        if (!live(gen) || !b.tailing || seq !== b.seq) return;
        clearError('browse');
        if (page.next !== null) b.next = page.next;
        if (page.messages.length) {
          const atBottom = list.scrollTop + list.clientHeight >= list.scrollHeight - 8;
          const seen = new Set(b.shown.map((m) => m.offset));
          const fresh = page.messages.filter((m) => !seen.has(m.offset));
          b.shown = b.shown.concat(fresh).slice(-TAIL_KEEP);
          list.querySelector('[data-testid=no-messages]')?.remove();
          for (const m of fresh) list.append(messageEl(m));
          while (list.children.length > b.shown.length) list.firstChild.remove();
          if (atBottom) list.scrollTop = list.scrollHeight;
          onChange();
        }
        status.textContent = `live · ${b.shown.length} shown · next offset ${fmtOffset(b.next)} · high watermark ${fmtOffset(page.hw)}`;
      } catch (e) {
        if (live(gen)) showError(e, 'browse');
      } finally {
        b.tailBusy = false;
      }
    }
    tail.addEventListener('change', () => {
      b.tailing = tail.checked;
      clearInterval(tailTimer);
      nextBtn.disabled = b.tailing || b.next === null;
      if (b.tailing) {
        tailTimer = setInterval(tailOnce, TAIL_EVERY_MS);
        state.timers.push(tailTimer);
        tailOnce();
      } else {
        status.textContent = `tail stopped · next offset ${fmtOffset(b.next)}`;
      }
    });

    function messageEl(m) {
      const bytes = b64ToBytes(m.value_b64);
      const v = renderValue(bytes, m.value_utf8, b.mode);
      const keyBytes = m.key_b64 ? b64ToBytes(m.key_b64) : null;
      let key = '—';
      if (keyBytes && keyBytes.length) {
        const k = utf8(keyBytes);
        key = k !== null ? k : Array.from(keyBytes, (x) => x.toString(16).padStart(2, '0')).join('');
      }
      const headers = Object.entries(m.headers || {}).map(([k, hv]) => {
        const hb = b64ToBytes(hv);
        const t = hb ? utf8(hb) : null;
        return h('span', { class: 'chip' }, `${k}: ${t !== null ? t : hv}`);
      });
      return h('div', { class: 'message', testid: 'message', dataset: { offset: String(m.offset) } },
        h('div', { class: 'meta' },
          h('span', {}, 'offset ', h('b', { testid: 'message-offset' }, String(m.offset))),
          h('span', { testid: 'message-time' }, fmtNs(m.timestamp_ns)),
          h('span', {}, 'key ', h('b', { testid: 'message-key' }, key)),
          m.subject ? h('span', {}, 'subject ', h('b', { class: 'mono', testid: 'message-subject' }, m.subject)) : null,
          m.reply_subject ? h('span', {}, 'reply ', h('b', { class: 'mono' }, m.reply_subject)) : null,
          h('span', {}, fmtBytes(bytes ? bytes.length : 0))),
        headers.length ? h('div', { class: 'headers chips', testid: 'message-headers' }, headers) : null,
        h('pre', { class: v.hex ? 'hex' : '', testid: 'message-value' }, v.text),
        v.note ? h('div', { class: 'note' }, v.note) : null);
    }

    function redraw() {
      list.replaceChildren(...b.shown.map(messageEl));
      if (!b.shown.length) list.append(h('p', { class: 'empty', testid: 'no-messages' }, 'No messages.'));
    }

    // Open on the oldest page, as if Load had been pressed.
    loadPage({});
    return panel;
  }

  function publishForm(name, id, after) {
    const value = h('textarea', { name: 'value', testid: 'publish-value', placeholder: '{"hello": "world"}' });
    const key = h('input', { name: 'key', testid: 'publish-key' });
    const hdrs = h('input', { name: 'headers', testid: 'publish-headers', placeholder: 'name=value, other=x' });
    const result = h('span', { class: 'muted', testid: 'publish-result' });
    const form = h('form', { class: 'panel', testid: 'publish-form' },
      h('details', {},
        h('summary', {}, 'Publish a message to this partition'),
        h('div', { class: 'form-grid' }, h('label', {}, 'Key (optional)', key), h('label', {}, 'Headers (optional)', hdrs)),
        h('label', {}, 'Value (UTF-8 text)', value),
        h('div', { class: 'row end' }, result, h('button', { type: 'submit', class: 'primary', testid: 'publish-btn' }, 'Publish'))));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const body = { value_b64: bytesToB64(new TextEncoder().encode(value.value)) };
      if (key.value) body.key = key.value;
      const hs = {};
      for (const part of hdrs.value.split(',')) {
        const [k, ...rest] = part.split('=');
        if (k && k.trim()) hs[k.trim()] = rest.join('=').trim();
      }
      if (Object.keys(hs).length) body.headers = hs;
      try {
        const r = await api('POST', `${partitionPath(name, id)}/messages`, body);
        result.textContent = `stored at offset ${r && r.offset !== undefined ? r.offset : '?'}`;
        clearError('action');
        after();
      } catch (e) {
        showError(e);
      }
    });
    return form;
  }

  // ---------------------------------------------------------------- connections

  function viewConnections({ main, gen }) {
    const sort = h('select', { testid: 'conn-sort', 'aria-label': 'sort by' },
      ...[['cid', 'connection id'], ['msgs_from', 'messages in'], ['msgs_to', 'messages out'],
        ['bytes_from', 'bytes in'], ['bytes_to', 'bytes out'], ['subs', 'subscriptions'],
        ['pending', 'pending'], ['idle', 'idle'], ['uptime', 'uptime']]
        .map(([v, l]) => h('option', { value: v }, l)));
    const summary = h('div', { class: 'cards', testid: 'subs-summary' });
    const tbody = h('tbody', { testid: 'connections-body' });
    const emptyEl = h('p', { class: 'empty hidden', testid: 'connections-empty' }, 'No client connections.');
    main.append(
      h('div', { class: 'title-row' }, h('h1', {}, 'Connections'), h('label', { class: 'check' }, 'Sort by', sort)),
      summary,
      h('div', { class: 'panel' },
        h('div', { class: 'table-wrap' }, h('table', { class: 'cards-sm', testid: 'connections-table' },
          h('thead', {}, h('tr', {},
            h('th', {}, 'Cid'), h('th', {}, 'Name'), h('th', {}, 'Address'), h('th', {}, 'Client'),
            h('th', {}, 'Uptime'), h('th', {}, 'Idle'), h('th', { class: 'num' }, 'In msgs'),
            h('th', { class: 'num' }, 'Out msgs'), h('th', { class: 'num' }, 'In / out bytes'),
            h('th', { class: 'num' }, 'Pending'), h('th', {}, 'Subscriptions'))),
          tbody)),
        emptyEl));
    sort.addEventListener('change', () => load());

    async function load() {
      let conns;
      let subs;
      try {
        [conns, subs] = await Promise.all([
          api('GET', `/api/v1/connections?${new URLSearchParams({ subs: '1', sort: sort.value, limit: '1024' })}`),
          api('GET', '/api/v1/subscriptions'),
        ]);
      } catch (e) {
        if (live(gen)) showError(e, 'load');
        return;
      }
      if (!live(gen)) return;
      clearError('load');
      const list = (conns && conns.connections) || [];
      summary.replaceChildren(
        card('Connections', 'conn-count', fmtNum(conns && conns.total !== undefined ? conns.total : list.length)),
        card('Subscriptions', 'subs-count', fmtNum(subs && subs.num_subscriptions)),
        card('Subject cache', 'subs-cache', fmtNum(subs && subs.num_cache)),
        card('Matches', 'subs-matches', fmtNum(subs && subs.num_matches)));
      emptyEl.classList.toggle('hidden', list.length > 0);
      tbody.replaceChildren(...list.map((c) => {
        const td = (label, cls, ...ch) => h('td', { 'data-label': label, class: cls }, ...ch);
        const subjects = c.subscriptions_list || (c.subscriptions_list_detail || []).map((d) => d.subject);
        const client = [c.lang, c.version].filter(Boolean).join(' ') || (c.type === 'internal' ? 'internal' : '—');
        return h('tr', { testid: 'conn-row', dataset: { cid: String(c.cid) } },
          td('Cid', 'mono', String(c.cid)),
          td('Name', '', h('span', { testid: 'conn-name' }, c.name || '—')),
          td('Address', 'mono', c.ip ? `${c.ip}:${c.port}` : '(in-process)'),
          td('Client', '', client),
          td('Uptime', '', c.uptime || '—'),
          td('Idle', '', c.idle || '—'),
          td('In msgs', 'num', fmtNum(c.in_msgs)),
          td('Out msgs', 'num', fmtNum(c.out_msgs)),
          td('In / out bytes', 'num', `${fmtBytes(c.in_bytes)} / ${fmtBytes(c.out_bytes)}`),
          td('Pending', 'num', fmtBytes(c.pending_bytes)),
          td('Subscriptions', '', subjects.length
            ? h('span', { class: 'chips', testid: 'conn-subs' }, subjects.map((s) => h('span', { class: 'chip' }, s)))
            : fmtNum(c.subscriptions)));
      }));
    }
    load();
    every(3000, load);
  }

  // ---------------------------------------------------------------- start

  function start() {
    $('banner-close').addEventListener('click', () => clearError());
    setupToken();
    window.addEventListener('hashchange', route);
    route();
    pollInfo();
    // A hidden tab stops polling; the rates stay right because each is
    // divided by the real time between two samples.
    setInterval(() => {
      if (!document.hidden) pollInfo();
    }, INFO_EVERY_MS);
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden) pollInfo();
    });
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
