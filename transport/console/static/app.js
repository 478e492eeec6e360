// The delaywheel console: plain DOM and canvas over the node's HTTP API.
// Every view has a refresh() that the poller calls every POLL_MS while the
// view is on screen; everything the page shows comes from the API.

const POLL_MS = 1500;
const SLOTS = 7200, COLS = 120, ROWS = 60; // a row is two minutes of slots
const HOUR = 3600000;
const PAGE = 50;
const TOKEN_KEY = 'delaywheel.token';

const $ = (id) => document.getElementById(id);

// el builds an element: el('td', {class: 'num'}, 'text', child…).
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (v !== false && v !== null && v !== undefined) e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) e.append(c instanceof Node ? c : String(c));
  return e;
}

const num = (n) => Number(n).toLocaleString('en-US');
const utc = (ms) => new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
function span(ms) {
  const neg = ms < 0; let s = Math.round(Math.abs(ms) / 1000);
  const parts = [];
  for (const [u, n] of [['d', 86400], ['h', 3600], ['m', 60], ['s', 1]]) {
    if (s >= n || (u === 's' && parts.length === 0)) { parts.push(Math.floor(s / n) + u); s %= n; }
    if (parts.length === 2) break;
  }
  return (neg ? '-' : '') + parts.join(' ');
}
function bytes(n) {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB']; let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}
const enc = encodeURIComponent;

// ---- the API and the token -------------------------------------------------

class APIError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

let token = sessionStorage.getItem(TOKEN_KEY) || '';

async function call(path, {method = 'GET', body, raw = false} = {}) {
  const headers = {};
  if (token) headers.Authorization = 'Bearer ' + token;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body), cache: 'no-store'});
  const text = await res.text();
  if (res.status === 401) {
    askToken(token ? 'The node refused this token.' : '');
    throw new APIError(401, 'unauthenticated', 'a token is needed');
  }
  if (raw && res.ok) return text;
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!res.ok) throw new APIError(res.status, data?.error?.code || '', data?.error?.message || `${res.status} ${text.slice(0, 200)}`);
  return data;
}

function askToken(why) {
  const d = $('token-dialog');
  $('token-error').textContent = why;
  if (!d.open) { d.showModal(); $('token-input').focus(); }
}

$('token-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  token = $('token-input').value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  $('token-input').value = '';
  $('token-dialog').close();
  poll();
});

// ---- navigation and polling --------------------------------------------------

const views = {};
let current = 'wheel', busy = false, ticks = 0;

function route() {
  const [name, arg] = location.hash.slice(1).split('/');
  current = views[name] ? name : 'wheel';
  for (const v of Object.keys(views)) $('view-' + v).hidden = v !== current;
  for (const a of document.querySelectorAll('nav a')) a.classList.toggle('active', a.dataset.view === current);
  views[current].enter?.(arg ? decodeURIComponent(arg) : undefined);
  poll();
}

async function poll() {
  if (busy || $('token-dialog').open) return;
  busy = true;
  try {
    const work = [views[current].refresh()];
    if (ticks++ % 4 === 0) work.push(refreshNode());
    await Promise.all(work);
    $('banner').hidden = true;
    $('status').textContent = 'updated ' + new Date().toLocaleTimeString();
  } catch (e) {
    if (e.status !== 401) { $('banner').hidden = false; $('banner').textContent = e.message; }
  } finally {
    busy = false;
  }
}

async function refreshNode() {
  const c = await call('/v1/cluster');
  const self = c.nodes?.find((n) => n.id === c.self);
  $('node').textContent = `node ${c.self}${c.self === c.leader ? ' (leader)' : ''} · leader ${c.leader || 'unknown'} · term ${c.term}` +
    (self ? ` · applied ${num(self.applied_index)}` : '');
}

// ---- Wheel -------------------------------------------------------------------

const RAMP = [[0x1d, 0x3b, 0x5c], [0x2f, 0x7f, 0xc1], [0x52, 0xc7, 0xb8], [0xe7, 0xd3, 0x6b], [0xff, 0x7a, 0x45], [0xff, 0x3d, 0x6e]];
function heat(t) {
  const x = Math.min(1, Math.max(0, t)) * (RAMP.length - 1), i = Math.min(RAMP.length - 2, Math.floor(x)), f = x - i;
  const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * f));
  return `rgb(${c})`;
}

const wheelState = {info: null, bySlot: new Map(), selected: -1, records: [], page: 0};

views.wheel = {
  async refresh() {
    const [info, over] = await Promise.all([
      call('/v1/wheel'),
      call('/v1/wheel/overflow?bucket_ms=3600000&limit=168').catch((e) => (e.status === 401 ? Promise.reject(e) : {error: e.message})),
    ]);
    wheelState.info = info;
    wheelState.bySlot = new Map(info.nonempty.map((s) => [s.slot, s]));
    drawWheel();
    drawOverflow(info, over);
    let msgs = 0, size = 0;
    for (const s of info.nonempty) { msgs += s.messages; size += s.bytes; }
    $('wheel-stats').replaceChildren(
      stat('cursor', utc(info.cursor_ms)), stat('horizon', utc(info.horizon_ms)),
      stat('slots holding files', num(info.nonempty.length)), stat('messages in the wheel', num(msgs)),
      stat('slot file bytes', bytes(size)), stat('overflow messages', num(info.overflow_messages)),
      stat('open segment handles', num(info.open_segments)));
  },
};

function stat(label, value, id) {
  return el('div', {class: 'stat', id}, el('b', {}, value), el('span', {}, label));
}

function slotSecond(slot) {
  const cur = Math.floor(wheelState.info.cursor_ms / 1000);
  return cur + ((slot - (cur % SLOTS)) % SLOTS + SLOTS) % SLOTS;
}

function drawWheel() {
  const cv = $('wheel-canvas'), g = cv.getContext('2d'), info = wheelState.info;
  const w = cv.width / COLS, h = cv.height / ROWS;
  let max = 1;
  for (const s of info.nonempty) max = Math.max(max, s.messages);
  $('wheel-max').textContent = num(max);
  g.fillStyle = '#1a222c';
  g.fillRect(0, 0, cv.width, cv.height);
  const lmax = Math.log1p(max);
  for (const s of info.nonempty) {
    g.fillStyle = s.messages ? heat(0.15 + 0.85 * Math.log1p(s.messages) / lmax) : '#263341';
    g.fillRect((s.slot % COLS) * w, Math.floor(s.slot / COLS) * h, w - 0.5, h - 0.5);
  }
  const outline = (slot, color) => {
    g.strokeStyle = color; g.lineWidth = 2;
    g.strokeRect((slot % COLS) * w - 1, Math.floor(slot / COLS) * h - 1, w + 1, h + 1);
  };
  // The cursor; the horizon is the same slot one lap on.
  const cur = Math.floor(info.cursor_ms / 1000) % SLOTS;
  g.fillStyle = 'rgba(255,255,255,0.35)';
  g.fillRect(0, Math.floor(cur / COLS) * h, (cur % COLS) * w, 1);
  outline(cur, '#ffffff');
  if (wheelState.selected >= 0) outline(wheelState.selected, '#4fb3ff');
}

function slotAt(ev) {
  const cv = $('wheel-canvas'), r = cv.getBoundingClientRect();
  const col = Math.floor((ev.clientX - r.left) / r.width * COLS), row = Math.floor((ev.clientY - r.top) / r.height * ROWS);
  return col >= 0 && col < COLS && row >= 0 && row < ROWS ? row * COLS + col : -1;
}

$('wheel-canvas').addEventListener('mousemove', (ev) => {
  const slot = slotAt(ev), info = wheelState.info;
  if (slot < 0 || !info) return;
  const s = wheelState.bySlot.get(slot), sec = slotSecond(slot);
  $('wheel-hover').textContent = `slot ${slot} · second ${sec} (${utc(sec * 1000)}, in ${span(sec * 1000 - info.cursor_ms)}) · ` +
    (s ? `${num(s.messages)} messages, ${bytes(s.bytes)}` : 'no file');
});
$('wheel-canvas').addEventListener('click', (ev) => { const s = slotAt(ev); if (s >= 0 && wheelState.info) showSlot(s); });

async function showSlot(slot) {
  wheelState.selected = slot;
  wheelState.page = 0;
  drawWheel();
  const box = $('slot-detail');
  box.replaceChildren(el('p', {class: 'muted'}, `reading slot ${slot}…`));
  try {
    const s = await call(`/v1/wheel/slots/${slot}?records=true`);
    wheelState.records = s.records || [];
    renderSlot(s);
  } catch (e) {
    box.replaceChildren(el('p', {class: 'error'}, e.message));
  }
}

function renderSlot(s) {
  const recs = wheelState.records, p = wheelState.page, pages = Math.max(1, Math.ceil(recs.length / PAGE));
  const rows = recs.slice(p * PAGE, (p + 1) * PAGE).map((r) => el('tr', {class: r.live ? '' : 'dead-row'},
    el('td', {class: 'num'}, r.offset), el('td', {}, r.type), el('td', {}, r.live ? 'live' : 'superseded'),
    el('td', {}, r.id ? el('a', {class: 'link', href: '#message/' + r.id}, r.id) : ''),
    el('td', {}, r.topic || ''), el('td', {class: 'num'}, r.due_ms ? r.due_ms : ''),
    el('td', {}, r.due_ms ? utc(r.due_ms) : ''), el('td', {class: 'num'}, r.attempts ?? ''), el('td', {class: 'num'}, r.bytes)));
  $('slot-detail').replaceChildren(el('div', {class: 'panel', id: 'slot-panel'},
    el('h2', {}, `Slot ${s.slot} `, el('span', {class: 'muted'}, `second ${s.second} · ${utc(s.second * 1000)}`)),
    el('dl', {class: 'kv'}, el('dt', {}, 'file'), el('dd', {}, s.file || '(none: the slot is empty)'),
      el('dt', {}, 'size'), el('dd', {}, `${bytes(s.bytes)} (${num(s.bytes)} bytes)`),
      el('dt', {}, 'live messages'), el('dd', {id: 'slot-messages'}, num(s.messages)),
      el('dt', {}, 'records'), el('dd', {}, num(recs.length))),
    el('div', {class: 'toolbar'},
      el('button', {onclick: () => showSlot(s.slot)}, 'Reload'),
      el('span', {class: 'pager'},
        el('button', {disabled: p === 0, onclick: () => { wheelState.page--; renderSlot(s); }}, '‹'),
        `page ${p + 1} of ${pages}`,
        el('button', {disabled: p + 1 >= pages, onclick: () => { wheelState.page++; renderSlot(s); }}, '›'))),
    el('div', {class: 'scroll'}, el('table', {class: 'grid', id: 'slot-records'},
      el('thead', {}, el('tr', {}, ['offset', 'type', '', 'id', 'topic', 'due ms', 'due', 'attempts', 'bytes'].map((h) => el('th', {}, h)))),
      el('tbody', {}, rows)))));
}

// drawOverflow draws the next week beyond the horizon hour by hour, and
// what lies later as one number.
function drawOverflow(info, over) {
  const cv = $('overflow-canvas'), g = cv.getContext('2d');
  g.clearRect(0, 0, cv.width, cv.height);
  if (over.error) { $('overflow-info').textContent = 'overflow histogram unavailable: ' + over.error; return; }
  const HOURS = 168, first = Math.floor(info.horizon_ms / HOUR) * HOUR, bars = new Array(HOURS).fill(0);
  let later = over.beyond;
  for (const b of over.buckets) {
    const i = Math.floor((b.start_ms - first) / HOUR);
    if (i >= 0 && i < HOURS) bars[i] += b.messages; else later += b.messages;
  }
  const max = Math.max(1, ...bars), top = 10, base = cv.height - 18, bw = cv.width / HOURS;
  g.strokeStyle = '#2a3441'; g.fillStyle = '#8694a6'; g.font = '11px system-ui, sans-serif';
  for (let d = 0; d <= 7; d++) {
    const x = d * 24 * bw;
    g.beginPath(); g.moveTo(x + 0.5, top); g.lineTo(x + 0.5, base); g.stroke();
    if (d < 7) g.fillText(`+${d}d`, x + 3, base + 14);
  }
  g.fillText(`max ${num(max)}/h`, 4, top + 2);
  bars.forEach((n, i) => {
    if (!n) return;
    const hgt = Math.max(2, (base - top) * n / max);
    g.fillStyle = heat(0.2 + 0.8 * n / max);
    g.fillRect(i * bw, base - hgt, Math.max(1, bw - 1), hgt);
  });
  $('overflow-info').textContent = `${num(over.total)} messages beyond the horizon; ${num(over.total - later)} in the 7 days from ${utc(first)}, ${num(later)} later.`;
}

// ---- Topics ------------------------------------------------------------------

// open is the topic whose panel is open (its webhook, schedules and dead
// letters): only its details are read, never every topic's.
const topicState = {topics: [], page: 0, prev: null, hist: new Map(), rates: new Map(), late: [], open: null, deadList: [], picked: new Set(),
  shown: {webhook: '', schedules: ''}};

// parseMetrics reads the lines of the Prometheus text format this page
// uses: message counters by topic, and the delivery lateness histogram.
function parseMetrics(text) {
  const counters = new Map(), late = [];
  for (const line of text.split('\n')) {
    if (line.startsWith('delaywheel_messages_total{')) {
      const m = /^[^{]+\{(.*)\} (\S+)/.exec(line);
      if (!m) continue;
      const labels = Object.fromEntries([...m[1].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
      const c = counters.get(labels.topic) || {};
      c[labels.event] = Number(m[2]);
      counters.set(labels.topic, c);
    } else if (line.startsWith('delaywheel_delivery_lateness_seconds_bucket{')) {
      const m = /le="([^"]+)"\} (\S+)/.exec(line);
      if (m) late.push([m[1] === '+Inf' ? Infinity : Number(m[1]), Number(m[2])]);
    }
  }
  return {counters, late};
}

// quantile is histogram_quantile over cumulative buckets [[le, count]…].
function quantile(q, buckets) {
  const total = buckets.length ? buckets[buckets.length - 1][1] : 0;
  if (!total) return NaN;
  const rank = q * total;
  let prevLe = 0, prevC = 0;
  for (const [le, c] of buckets) {
    if (c >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * (c > prevC ? (rank - prevC) / (c - prevC) : 0);
    }
    prevLe = le; prevC = c;
  }
  return prevLe;
}

const fmtSec = (s) => (isNaN(s) ? '–' : s < 1 ? (s * 1000).toFixed(s < 0.01 ? 2 : 0) + ' ms' : s.toFixed(2) + ' s');

function sparkline(values, color) {
  const w = 90, h = 20, NS = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('width', w); svg.setAttribute('height', h); svg.setAttribute('class', 'spark');
  const max = Math.max(1e-9, ...values);
  const pts = values.map((v, i) => `${(i / Math.max(1, values.length - 1)) * (w - 2) + 1},${h - 1 - (v / max) * (h - 2)}`);
  const line = document.createElementNS(NS, 'polyline');
  line.setAttribute('points', pts.join(' ')); line.setAttribute('fill', 'none');
  line.setAttribute('stroke', color); line.setAttribute('stroke-width', '1.5');
  svg.append(line);
  return svg;
}

function recordMetrics(text) {
  const now = Date.now(), {counters, late} = parseMetrics(text), prev = topicState.prev;
  if (prev) {
    const dt = (now - prev.at) / 1000;
    for (const [topic, c] of counters) {
      const p = prev.counters.get(topic) || {};
      const enq = Math.max(0, ((c.enqueued || 0) - (p.enqueued || 0)) / dt), del = Math.max(0, ((c.delivered || 0) - (p.delivered || 0)) / dt);
      const h = topicState.hist.get(topic) || {enq: [], del: []};
      h.enq.push(enq); h.del.push(del);
      if (h.enq.length > 40) { h.enq.shift(); h.del.shift(); }
      topicState.hist.set(topic, h);
      topicState.rates.set(topic, enq);
    }
  }
  topicState.prev = {at: now, counters};
  // Lateness over the last minute of polls, or since the start when the
  // minute had no deliveries.
  topicState.late.push({at: now, late});
  while (topicState.late.length > 2 && now - topicState.late[0].at > 60000) topicState.late.shift();
  const old = topicState.late[0].late, window = late.map(([le, c], i) => [le, c - (old[i]?.[1] || 0)]);
  const recent = window.length && window[window.length - 1][1] > 0;
  const use = recent ? window : late, n = use.length ? use[use.length - 1][1] : 0;
  $('lateness').replaceChildren(
    stat(`delivery lateness p50 on this node (${recent ? "last minute" : "since start"})`, fmtSec(quantile(0.5, use))),
    stat('p90', fmtSec(quantile(0.9, use))), stat('p99', fmtSec(quantile(0.99, use))),
    stat('deliveries measured', num(n)));
}

// With many topics /metrics is large (about a dozen lines a topic): it is
// read every fourth poll then, and the rates are per second of real time
// between two reads whatever their spacing.
let metricsTicks = 0;

views.topics = {
  enter(topic) { if (topic) openTopic(topic); else closeTopic(); },
  async refresh() {
    const many = topicState.topics.length > 1000, readMetrics = !many || metricsTicks++ % 4 === 0;
    const [t, m] = await Promise.all([call('/v1/topics'),
      readMetrics ? call('/metrics', {raw: true}).catch((e) => (e.status === 401 ? Promise.reject(e) : '')) : '',
      topicState.open ? loadTopicDetails() : null]);
    topicState.topics = t.topics;
    if (m) recordMetrics(m);
    renderTopics();
  },
};

function renderTopics() {
  const f = $('topic-filter').value.trim().toLowerCase(), key = $('topic-sort').value;
  let list = f ? topicState.topics.filter((t) => t.topic.toLowerCase().includes(f)) : topicState.topics.slice();
  if (key === 'rate') list.sort((a, b) => (topicState.rates.get(b.topic) || 0) - (topicState.rates.get(a.topic) || 0));
  else if (key !== 'topic') list.sort((a, b) => b[key] - a[key] || (a.topic < b.topic ? -1 : 1));
  const pages = Math.max(1, Math.ceil(list.length / PAGE));
  topicState.page = Math.min(topicState.page, pages - 1);
  const p = topicState.page;
  $('topic-count').textContent = `${num(list.length)} of ${num(topicState.topics.length)} topics`;
  $('topic-page').textContent = `page ${p + 1} of ${pages}`;
  $('topic-prev').disabled = p === 0;
  $('topic-next').disabled = p + 1 >= pages;
  const fmtRate = (v) => (v === undefined ? '–' : v < 10 ? v.toFixed(1) : num(Math.round(v)));
  $('topic-table').tBodies[0].replaceChildren(...list.slice(p * PAGE, (p + 1) * PAGE).map((t) => {
    const h = topicState.hist.get(t.topic) || {enq: [], del: []};
    return el('tr', {'data-topic': t.topic},
      el('td', {}, t.topic), el('td', {class: 'num'}, num(t.delayed)), el('td', {class: 'num'}, num(t.ready)),
      el('td', {class: 'num'}, num(t.reserved)), el('td', {class: t.dead ? 'num bad' : 'num'}, num(t.dead)),
      el('td', {}, sparkline(h.enq, '#4fb3ff'), ' ', fmtRate(h.enq[h.enq.length - 1])),
      el('td', {}, sparkline(h.del, '#5fd38d'), ' ', fmtRate(h.del[h.del.length - 1])),
      el('td', {}, el('a', {class: 'button topic-open', href: '#topics/' + enc(t.topic), title: 'its webhook, schedules and dead letters'}, 'details')));
  }));
}

$('topic-filter').addEventListener('input', () => { topicState.page = 0; renderTopics(); });
$('topic-sort').addEventListener('change', renderTopics);
$('topic-prev').addEventListener('click', () => { topicState.page--; renderTopics(); });
$('topic-next').addEventListener('click', () => { topicState.page++; renderTopics(); });

function openTopic(topic) {
  if (topicState.open !== topic) {
    topicState.open = topic;
    topicState.picked.clear();
    topicState.shown = {webhook: '', schedules: ''};
    $('topic-name').textContent = topic;
    $('topic-webhook').replaceChildren('reading…');
    $('schedule-table').tBodies[0].replaceChildren();
    $('schedule-count').textContent = '';
    for (const id of ['webhook-result', 'schedule-result', 'dead-result']) $(id).textContent = '';
    loadDead();
    loadTopicDetails().catch(() => {}); // the poller shows the error
  }
  $('topic-panel').hidden = false;
}

function closeTopic() {
  topicState.open = null;
  $('topic-panel').hidden = true;
}

$('topic-close').addEventListener('click', () => { location.hash = '#topics'; });

// loadTopicDetails reads the open topic's webhook and schedules; the
// poller calls it while the panel is open.
async function loadTopicDetails() {
  const topic = topicState.open;
  const [hook, sch] = await Promise.all([
    call(`/v1/topics/${enc(topic)}/webhook`).catch((e) => (e.status === 404 ? null : Promise.reject(e))),
    topicSchedules(topic)]);
  if (topic !== topicState.open) return;
  renderWebhook(topic, hook);
  renderSchedules(sch);
}

// SCHEDULES_SHOWN bounds the schedules listed for one topic, and
// SCHEDULE_PAGES the requests spent finding them: the server pages one
// topic's schedules over bounded runs of all of them.
const SCHEDULES_SHOWN = 100, SCHEDULE_PAGES = 10;

async function topicSchedules(topic) {
  const list = [];
  let after = '', pages = 0;
  do {
    const r = await call(`/v1/schedules?topic=${enc(topic)}&limit=${SCHEDULES_SHOWN - list.length}` + (after ? `&after=${enc(after)}` : ''));
    list.push(...r.schedules);
    after = r.next || '';
  } while (after && list.length < SCHEDULES_SHOWN && ++pages < SCHEDULE_PAGES);
  return {list, more: after !== ''};
}

function renderWebhook(topic, w) {
  const key = JSON.stringify(w);
  if (topicState.shown.webhook === key) return;
  topicState.shown.webhook = key;
  if (!w) {
    $('topic-webhook').replaceChildren(el('p', {class: 'muted', id: 'webhook-none'}, 'none: consumers reserve its messages'));
    return;
  }
  const kv = [['url', w.url], ['timeout', span(w.timeout_ms)], ['max concurrency', num(w.max_concurrency)],
    ['rate', w.rate_per_s ? `${num(w.rate_per_s)}/s` : 'no limit'], ['secret', w.has_secret ? 'set (never shown)' : 'none']];
  $('topic-webhook').replaceChildren(
    el('dl', {class: 'kv', id: 'webhook-fields'}, kv.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {'data-field': k}, v)])),
    el('button', {class: 'danger', id: 'webhook-remove', onclick: async () => {
      try {
        await call(`/v1/topics/${enc(topic)}/webhook`, {method: 'DELETE'});
        answer('webhook-result', 'ok', 'webhook removed');
      } catch (e) {
        answer('webhook-result', 'error', e.message);
      }
      if (topic === topicState.open) await loadTopicDetails().catch(() => {});
    }}, 'Remove webhook'));
}

function renderSchedules({list, more}) {
  const key = JSON.stringify(list);
  $('schedule-count').textContent = `(${num(list.length)}${more ? '+' : ''})`;
  if (topicState.shown.schedules === key) return;
  topicState.shown.schedules = key;
  const at = (ms) => (ms == null ? '–' : el('span', {title: `${ms} ms`}, utc(ms)));
  const tbody = $('schedule-table').tBodies[0];
  if (!list.length) {
    tbody.replaceChildren(el('tr', {}, el('td', {colspan: 7, class: 'muted'}, 'no schedule enqueues to this topic')));
    return;
  }
  tbody.replaceChildren(...list.map((sc) => el('tr', {'data-schedule': sc.name},
    el('td', {}, sc.name), el('td', {}, sc.cron ? 'cron ' + sc.cron : 'every ' + span(sc.every_ms)),
    el('td', {}, sc.cron ? sc.timezone || 'UTC' : '–'), el('td', {}, at(sc.last_at_ms)),
    el('td', {}, sc.next_at_ms == null ? 'ended' : at(sc.next_at_ms)), el('td', {class: 'num'}, num(sc.fired)),
    el('td', {}, el('button', {class: 'danger schedule-delete', 'data-name': sc.name, onclick: () => deleteSchedule(sc.name)}, 'Delete')))));
}

async function deleteSchedule(name) {
  try {
    await call(`/v1/schedules/${enc(name)}`, {method: 'DELETE'});
    answer('schedule-result', 'ok', `schedule ${name} deleted`);
  } catch (e) {
    answer('schedule-result', 'error', e.message);
  }
  if (topicState.open) await loadTopicDetails().catch(() => {});
}

function answer(id, cls, text) {
  $(id).className = cls;
  $(id).textContent = text;
}

async function loadDead() {
  const topic = topicState.open;
  let d;
  try {
    d = await call(`/v1/topics/${enc(topic)}/dead?limit=1000`);
  } catch (e) {
    if (topic === topicState.open) answer('dead-result', 'error', e.message);
    return;
  }
  if (topic !== topicState.open) return;
  const list = topicState.deadList = d.messages || [];
  topicState.picked.clear();
  $('dead-count').textContent = `(${num(list.length)}${list.length === 1000 ? '+' : ''})`;
  $('dead-all').checked = false;
  $('redrive-selected').disabled = true;
  $('dead-table').tBodies[0].replaceChildren(...list.map((m) => el('tr', {},
    el('td', {}, el('input', {type: 'checkbox', class: 'dead-pick', 'data-id': m.id, onchange: pick})),
    el('td', {}, el('a', {class: 'link', href: '#message/' + m.id}, m.id)),
    el('td', {class: 'num'}, m.attempts), el('td', {}, utc(m.deliver_at_ms)), el('td', {}, m.key || ''),
    el('td', {class: 'body'}, m.body ?? (m.body_base64 ? '(base64) ' + m.body_base64 : '')))));
}

function pick() {
  topicState.picked = new Set([...document.querySelectorAll('.dead-pick:checked')].map((c) => c.dataset.id));
  $('redrive-selected').disabled = topicState.picked.size === 0;
}

$('dead-all').addEventListener('change', (ev) => {
  for (const c of document.querySelectorAll('.dead-pick')) c.checked = ev.target.checked;
  pick();
});

async function redrive(ids) {
  const topic = topicState.open;
  try {
    const r = await call(`/v1/topics/${enc(topic)}/dead/redrive`, {method: 'POST', body: ids ? {ids} : {}});
    answer('dead-result', 'ok', `redriven ${r.redriven}`);
  } catch (e) {
    answer('dead-result', 'error', e.message);
  }
  await loadDead();
}

$('redrive-selected').addEventListener('click', () => redrive([...topicState.picked]));
$('redrive-all').addEventListener('click', () => redrive(null));

// ---- Message -----------------------------------------------------------------

let shownID = '';

views.message = {
  enter(id) { if (id) { shownID = id; $('lookup-id').value = id; } },
  async refresh() { if (shownID) await showMessage(shownID); },
};

async function showMessage(id) {
  const box = $('message-detail');
  box.hidden = false;
  let m;
  try {
    m = await call(`/v1/messages/${enc(id)}`);
  } catch (e) {
    if (e.status === 401) throw e;
    const gone = e.status === 404 ? 'No pending message has this id: it was acked, cancelled, or never existed.' : e.message;
    box.replaceChildren(el('h2', {}, 'Message ', id), el('p', {class: 'error', id: 'message-error'}, gone));
    return;
  }
  if (box.dataset.shown === JSON.stringify(m)) return; // keep the inputs as typed
  box.dataset.shown = JSON.stringify(m);
  const kv = [['id', m.id], ['topic', m.topic], ['state', m.state], ['deliver at', `${utc(m.deliver_at_ms)} (${m.deliver_at_ms} ms)`],
    ['enqueued', m.enqueued_ms ? utc(m.enqueued_ms) : '–'], ['attempts', m.attempts], ['key', m.key || '–'], ['priority', m.priority],
    ['headers', Object.entries(m.headers || {}).map(([k, v]) => `${k}: ${v}`).join(', ') || '–']];
  box.replaceChildren(
    el('h2', {}, 'Message ', m.id),
    el('dl', {class: 'kv', id: 'message-fields'}, kv.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {'data-field': k}, v)])),
    el('pre', {}, m.body ?? (m.body_base64 ? '(base64) ' + m.body_base64 : '')),
    el('div', {class: 'toolbar'},
      el('button', {class: 'danger', id: 'cancel-message', onclick: () => act(() => call(`/v1/messages/${enc(m.id)}`, {method: 'DELETE'}), 'cancelled')}, 'Cancel'),
      el('label', {}, 'reschedule in ', el('input', {id: 'resched-delay', type: 'number', min: 0, step: 'any', size: 8, placeholder: 'seconds'}), ' s'),
      el('button', {id: 'resched-button', onclick: () => {
        const s = Number($('resched-delay').value);
        act(() => call(`/v1/messages/${enc(m.id)}/reschedule`, {method: 'POST', body: {delay_ms: Math.round(s * 1000)}}),
          (r) => `rescheduled to ${utc(r.deliver_at_ms)}`);
      }}, 'Reschedule'),
      el('span', {id: 'message-result', class: 'muted'})));
}

async function act(fn, done) {
  const out = $('message-result');
  try {
    const r = await fn();
    out.className = 'ok';
    out.textContent = typeof done === 'function' ? done(r) : done;
    $('message-detail').dataset.shown = '';
  } catch (e) {
    out.className = 'error';
    out.textContent = e.message;
  }
}

$('lookup-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const id = $('lookup-id').value.trim();
  if (id) location.hash = '#message/' + enc(id);
});

const keyPath = () => `/v1/topics/${enc($('key-topic').value.trim())}/keys/${enc($('key-key').value)}`;

$('key-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  try {
    const m = await call(keyPath());
    location.hash = '#message/' + enc(m.id);
  } catch (e) {
    keyAnswer('error', e.status === 404 ? 'No pending message of this topic holds this key.' : e.message);
  }
});

$('key-cancel').addEventListener('click', async () => {
  if (!$('key-form').reportValidity()) return;
  try {
    const r = await call(keyPath(), {method: 'DELETE'});
    keyAnswer('ok', `cancelled message ${r.id}`);
  } catch (e) {
    keyAnswer('error', e.message);
  }
});

function keyAnswer(cls, text) {
  shownID = '';
  const box = $('message-detail');
  box.hidden = false;
  box.dataset.shown = '';
  box.replaceChildren(el('p', {class: cls, id: 'key-result'}, text));
}

// ---- Cluster -----------------------------------------------------------------

views.cluster = {
  async refresh() {
    const c = await call('/v1/cluster');
    $('cluster-stats').replaceChildren(stat('this node', c.self), stat('leader', c.leader || 'unknown'),
      stat('term', num(c.term)), stat('members', num(c.nodes.length)), stat('view of', c.view_of || c.self));
    $('cluster-table').tBodies[0].replaceChildren(...c.nodes.map((n) => el('tr', {class: n.id === c.self ? 'self' : ''},
      el('td', {}, n.id), el('td', {class: n.state === 'leader' ? 'state-leader' : ''}, n.state || ''), el('td', {}, n.suffrage || ''),
      el('td', {}, n.http_addr || ''), el('td', {}, n.raft_addr || ''), el('td', {class: n.reachable === false ? 'bad' : ''}, n.reachable == null ? '–' : n.reachable ? 'yes' : 'no'),
      el('td', {}, n.last_contact_ms == null ? '–' : span(n.last_contact_ms) + ' ago'),
      el('td', {class: 'num'}, num(n.applied_index || 0)), el('td', {class: n.lag ? 'num bad' : 'num'}, n.lag == null ? '–' : num(n.lag)))));
    // Per Raft group: its leader and term, the leader's indexes, and how
    // far this node (the one answering) has applied behind its commit.
    const groups = c.groups || [];
    $('groups').replaceChildren(...(groups.length ? [el('h2', {}, 'Groups ', el('span', {class: 'muted'}, `(lag: node ${c.self} behind the group leader's commit)`)),
      el('table', {class: 'grid', id: 'group-table'},
        el('thead', {}, el('tr', {}, [['group'], ['leader'], ['term', 'num'], ['applied', 'num'], ['commit', 'num'], ['lag', 'num']].map(([h, cls]) => el('th', {class: cls}, h)))),
        el('tbody', {}, groups.map((g) => el('tr', {'data-group': g.group}, el('td', {}, g.group),
          el('td', {class: g.leader ? 'state-leader' : 'bad', 'data-field': 'leader'}, g.leader || 'none'), el('td', {class: 'num'}, num(g.term)),
          el('td', {class: 'num'}, g.applied_index ? num(g.applied_index) : '–'), el('td', {class: 'num'}, g.commit_index ? num(g.commit_index) : '–'),
          el('td', {class: g.lag ? 'num bad' : 'num', 'data-field': 'lag'}, g.lag == null ? '–' : num(g.lag))))))] : []));
  },
};

window.addEventListener('hashchange', route);
route();
setInterval(poll, POLL_MS);
