// The KV container's status page: sign-in, the Now / Rates / Lists / Search views and one
// record's view. Plain DOM, no framework, nothing loaded from elsewhere. Text from the store
// is always set as text (never parsed as HTML). The token lives in sessionStorage only.
'use strict';
(function () {
  const TOKEN = 'stateful-tool-kv-token';
  const SVG = 'http://www.w3.org/2000/svg';
  const REFRESH_MS = 5000;
  const $ = (id) => document.getElementById(id);
  let timer = null;
  let generation = 0; // answers for a view the user already left are dropped
  const search = { prefix: 'evt', pages: [''], next: null };

  class Unauthorized extends Error {}

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v !== undefined && v !== null) e.setAttribute(k, v);
    }
    for (const k of kids.flat()) {
      if (k !== undefined && k !== null) e.append(k instanceof Node ? k : String(k));
    }
    return e;
  }

  function svg(tag, attrs, ...kids) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    for (const k of kids) e.append(k);
    return e;
  }

  async function api(path) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN);
    if (token) headers.Authorization = 'Bearer ' + token;
    const resp = await fetch('api/' + path, { headers, cache: 'no-store', credentials: 'omit' });
    if (resp.status === 401) throw new Unauthorized('unauthorized');
    let body = null;
    try { body = await resp.json(); } catch (_) { /* not JSON: reported below */ }
    if (!resp.ok) throw new Error((body && body.message) || 'HTTP ' + resp.status);
    return body;
  }

  // `850ms`, `42s`, `1m1s`, `3h5m`, `6d23h59m`: the same as `kv ls` / `kv get`.
  function duration(ms) {
    if (ms < 1000) return Math.max(0, Math.floor(ms)) + 'ms';
    const s = Math.floor(ms / 1000);
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60, sec = s % 60;
    if (d > 0) return `${d}d${h}h${m}m`;
    if (h > 0) return `${h}h${m}m`;
    if (m > 0) return `${m}m${sec}s`;
    return `${sec}s`;
  }

  function bytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + ' ' + units[i];
  }

  const time = (ms) => new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
  const keyLink = (key) => el('a', { href: '#record/' + encodeURIComponent(key) }, key);

  function card(label, value, sub, attrs) {
    return el('div', { class: 'card' }, el('div', { class: 'label' }, label),
      el('div', Object.assign({ class: 'big' }, attrs || {}), value), sub ? el('div', { class: 'sub' }, sub) : null);
  }

  function table(id, head, rows) {
    return el('table', { id }, el('thead', {}, el('tr', {}, head.map((h) => el('th', {}, h)))),
      el('tbody', {}, rows.length ? rows : [el('tr', {}, el('td', { colspan: head.length }, 'none'))]));
  }

  function stop() {
    if (timer) clearTimeout(timer);
    timer = null;
  }

  function showLogin(message) {
    stop();
    generation++;
    sessionStorage.removeItem(TOKEN);
    $('view').replaceChildren();
    $('view').hidden = true;
    $('nav').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = message || '';
    $('token').value = '';
    $('token').focus();
  }

  async function signIn(ev) {
    ev.preventDefault();
    const token = $('token').value.trim();
    $('token').value = '';
    if (!token) return;
    sessionStorage.setItem(TOKEN, token);
    try {
      await api('now');
    } catch (e) {
      if (e instanceof Unauthorized) return showLogin('That token was refused.');
    }
    $('login').hidden = true;
    route();
  }

  function route() {
    stop();
    const gen = ++generation;
    const [name, ...rest] = location.hash.slice(1).split('/');
    const arg = decodeURIComponent(rest.join('/'));
    const views = { now: viewNow, rates: viewRates, lists: viewLists, search: viewSearch, record: viewRecord };
    const view = views[name] || viewNow;
    for (const tab of ['now', 'rates', 'lists', 'search']) {
      $('tab-' + tab).className = (views[name] ? name : 'now') === tab ? 'on' : '';
    }
    $('nav').hidden = false;
    $('view').hidden = false;
    const live = [viewNow, viewRates, viewLists].includes(view);
    view(gen, arg).then(() => {
      if (live && gen === generation) timer = setTimeout(route, REFRESH_MS);
    }, (e) => {
      if (e instanceof Unauthorized) return showLogin('The token was refused.');
      if (gen === generation) $('view').replaceChildren(el('p', { class: 'error' }, 'Could not load: ' + e.message));
      if (live && gen === generation) timer = setTimeout(route, REFRESH_MS);
    });
  }

  function render(gen, ...nodes) {
    if (gen === generation) $('view').replaceChildren(...nodes);
  }

  async function viewNow(gen) {
    const d = await api('now');
    const ok = d.health.status === 'ok';
    const cards = [card('Health (/healthz)', d.health.status, d.health.reason || 'writes and reads work',
      { id: 'health-status', class: 'big ' + (ok ? 'ok' : 'bad') })];
    const c = d.census;
    if (c) {
      for (const s of ['processing', 'completed', 'failed']) cards.push(card(s, c.counts[s], null, { id: 'count-' + s }));
      cards.push(card('stuck', c.counts.stuck, `processing past its lease, or ${duration(c.stuck_after_s * 1000)} without one`,
        { id: 'count-stuck', class: 'big ' + (c.counts.stuck > 0 ? 'warn' : '') }));
      cards.push(card('other keys', c.counts.other, 'values that are not event records', { id: 'count-other' }));
    } else {
      cards.push(card('records', '?', d.census_error, { class: 'big bad' }));
    }
    const disk = d.disk;
    const free = disk.free_bytes != null ? `${bytes(disk.free_bytes)} free of ${bytes(disk.total_bytes)}` : null;
    cards.push(card('data file', bytes(disk.data_file_bytes), free, { id: 'disk' }));
    cards.push(card('durability', d.durability, d.durability === 'immediate' ? 'every write fsync\'d before its answer'
      : 'no fsync per write: a crash can lose recent writes', { id: 'durability', class: 'big ' + (d.durability === 'immediate' ? '' : 'warn') }));
    cards.push(card('uptime', duration(d.uptime_s * 1000), 'since ' + time(d.started_ms), { id: 'uptime' }));
    cards.push(card('connections', `${d.connections.open} / ${d.connections.max}`, 'open / cap'));
    cards.push(card('last online backup', d.last_backup_ms ? duration(d.now_ms - d.last_backup_ms) + ' ago' : 'none',
      d.last_backup_ms ? time(d.last_backup_ms) : 'none since this server started'));
    const note = c ? `Counts ${duration(d.now_ms - c.as_of_ms)} old, kept as writes happen (read in ${c.scan_ms} ms; ${c.keys} live keys). ` +
      'Version ' + d.version + '.' : '';
    render(gen, el('div', { class: 'grid' }, cards), el('p', { class: 'note', id: 'census-note' }, note));
  }

  function chart(title, series, unit, slots) {
    const W = 1100, H = 170, L = 52, B = 18, T = 8;
    let max = 0;
    for (const s of series) for (const v of s.values) if (v != null && v > max) max = v;
    max = max > 0 ? max * 1.1 : 1;
    const x = (i) => L + (i * (W - L - 4)) / (slots - 1);
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const g = svg('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title });
    g.append(svg('line', { x1: L, y1: y(0), x2: W, y2: y(0), class: 'axis' }), svg('line', { x1: L, y1: T, x2: L, y2: y(0), class: 'axis' }));
    const label = (x0, y0, text, anchor) => {
      const t = svg('text', { x: x0, y: y0, 'text-anchor': anchor || 'start' });
      t.textContent = text;
      return t;
    };
    g.append(label(L - 4, T + 9, max.toPrecision(2) + unit, 'end'), label(L - 4, y(0), '0', 'end'),
      label(L, H - 3, '-15 min'), label(W - 4, H - 3, 'now', 'end'));
    for (const s of series) {
      let pts = [];
      // A lone point (one slot with data between empty ones) is drawn as a dot.
      const flush = () => {
        if (pts.length === 1) {
          const [cx, cy] = pts[0].split(',');
          g.append(svg('circle', { cx, cy, r: 2.5, class: s.cls + ' dot' }));
        } else if (pts.length) {
          g.append(svg('polyline', { points: pts.join(' '), class: s.cls }));
        }
        pts = [];
      };
      s.values.forEach((v, i) => (v == null ? flush() : pts.push(`${x(i).toFixed(1)},${y(v).toFixed(1)}`)));
      flush();
    }
    const legend = el('div', { class: 'legend' }, series.map((s) => el('span', {}, el('i', { class: s.cls }), s.name)));
    return el('div', { class: 'chart' }, el('h2', {}, title), g, legend);
  }

  async function viewRates(gen) {
    const d = await api('rates');
    const per = d.slot_s, sl = d.slots;
    const sum = (f) => sl.reduce((a, s) => a + f(s), 0);
    const claims = [
      { name: 'accepted', cls: 's1', values: sl.map((s) => (s.accepted + s.reclaimed) / per) },
      { name: 'duplicate', cls: 's2', values: sl.map((s) => s.duplicate / per) },
      { name: 'conflict', cls: 's3', values: sl.map((s) => s.conflict / per) },
      { name: 'other', cls: 's4', values: sl.map((s) => s.other / per) },
    ];
    const p99 = [{ name: 'write p99', cls: 's1', values: sl.map((s) => (s.write_p99_ms === undefined ? null : s.write_p99_ms)) }];
    const totals = table('rate-totals', ['last 15 min', 'accepted', 'of which reclaimed', 'duplicate', 'conflict', 'other', 'writes'],
      [el('tr', {}, el('td', {}, 'count'), [sum((s) => s.accepted + s.reclaimed), sum((s) => s.reclaimed), sum((s) => s.duplicate),
        sum((s) => s.conflict), sum((s) => s.other), sum((s) => s.writes)].map((n) => el('td', {}, n)))]);
    render(gen, chart('Claims per second', claims, '/s', sl.length), chart('Write p99', p99, ' ms', sl.length), totals,
      el('p', { class: 'note' }, `${per}-second slots kept by the server since it started. Accepted: creates answered 201, plus ` +
        'failed or expired events claimed again. Duplicate / conflict: creates refused (412) whose stored record has the same / ' +
        'another fingerprint. Other: refused creates of values that are not event records.'));
  }

  function ageCell(b, now) {
    return el('td', {}, duration(now - b.modified_ms));
  }

  function why(b, now) {
    if (b.stuck === 'never_started') {
      return `claimed at the trigger's door, no run started (window ended ${duration(now - b.lease_until_ms)} ago)`;
    }
    if (b.stuck === 'lease_expired') return `lease expired ${duration(now - b.lease_until_ms)} ago`;
    return `processing for ${duration(now - b.modified_ms)}, no lease`;
  }

  function briefRow(b, now, last) {
    return el('tr', { 'data-key': b.key }, el('td', {}, keyLink(b.key)), el('td', {}, b.event_type || ''),
      el('td', {}, b.attempt == null ? '' : b.attempt), ageCell(b, now), el('td', { class: 'wrap' }, last));
  }

  async function viewLists(gen) {
    const d = await api('lists');
    const now = d.now_ms;
    render(gen,
      el('h2', {}, 'Stuck records'),
      el('p', { class: 'note' }, `processing past the lease, or for ${duration(d.stuck_after_s * 1000)} without one; the 50 most recently written`),
      table('stuck-list', ['key', 'event type', 'attempt', 'age', 'why'], d.stuck.map((b) => briefRow(b, now, why(b, now)))),
      el('h2', {}, 'Failed records'),
      el('p', { class: 'note' }, 'the 50 most recently written; the next delivery of each retries it'),
      table('failed-list', ['key', 'event type', 'attempt', 'age', 'result'], d.failed.map((b) => briefRow(b, now, b.result || '-'))));
  }

  async function viewSearch(gen) {
    const input = el('input', { id: 'prefix', name: 'prefix', value: search.prefix, placeholder: 'key prefix, e.g. evt_ or evt_<namespace>~', autocomplete: 'off' });
    const form = el('form', { class: 'search', id: 'search-form' }, input, el('button', { type: 'submit' }, 'Search'));
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      Object.assign(search, { prefix: input.value.trim(), pages: [''] });
      route();
    });
    const after = search.pages[search.pages.length - 1];
    const q = 'keys?limit=50&prefix=' + encodeURIComponent(search.prefix) + (after ? '&after=' + encodeURIComponent(after) : '');
    const d = await api(q);
    const rows = d.keys.map((b) => briefRow(b, d.now_ms, b.status + (b.stuck ? ' (stuck)' : '')));
    const more = el('div', { class: 'search' });
    if (search.pages.length > 1) {
      const back = el('button', { type: 'button' }, 'First page');
      back.addEventListener('click', () => { search.pages = ['']; route(); });
      more.append(back);
    }
    if (d.next) {
      const next = el('button', { type: 'button', id: 'next-page' }, 'Next page');
      next.addEventListener('click', () => { search.pages.push(d.next); route(); });
      more.append(next);
    }
    render(gen, form, table('search-list', ['key', 'event type', 'attempt', 'age', 'status'], rows), more,
      el('p', { class: 'note' }, 'Keys in byte order, 50 a page, as `kv ls --prefix` lists them.'));
  }

  function lease(v, now) {
    if (v.lease_until_ms == null) return 'none (stays processing until completed)';
    const left = v.lease_until_ms - now;
    return `until ${time(v.lease_until_ms)} (${left > 0 ? duration(left) + ' left' : 'expired ' + duration(-left) + ' ago'})`;
  }

  async function viewRecord(gen, key) {
    const d = await api('record/' + encodeURIComponent(key));
    const v = d.value, b = d.brief;
    const ttl = d.expires_ms ? duration(d.expires_ms - d.now_ms) : 'none';
    const rows = [['key', d.key]];
    if (b.status !== 'other') {
      rows.push(['event_id', v.event_id], ['event_type', v.event_type], ['status', v.status + (b.stuck ? ' (stuck)' : '')],
        ['attempt', v.attempt], ['received_at', v.received_at], ['updated_at', v.updated_at], ['lease', lease(v, d.now_ms)],
        ['completed_at', v.completed_at || '-'], ['result', v.result == null ? '-' : v.result], ['fingerprint', v.fingerprint],
        ['ttl', ttl], ['record', `v${v.v}, ${b.size} bytes`], ['payload', v.payload == null ? '-' : v.payload]);
    } else {
      rows.push(['ttl', ttl], ['note', 'not an event record']);
    }
    rows.push(['revision', d.rev], ['written', time(d.modified_ms)]);
    const trs = rows.map(([f, val]) => el('tr', { 'data-field': f }, el('th', {}, f), el('td', { class: 'wrap' }, String(val))));
    render(gen, el('h2', {}, 'Record ', el('code', {}, d.key)), el('table', { id: 'record' }, el('tbody', {}, trs)),
      el('h2', {}, 'Stored JSON'), el('pre', { id: 'raw' }, JSON.stringify(v, null, 2)));
  }

  $('login').addEventListener('submit', signIn);
  $('logout').addEventListener('click', () => showLogin(''));
  window.addEventListener('hashchange', () => { if ($('login').hidden) route(); });
  // A store without a token needs no sign-in; with one, the form comes first.
  api('now').then(() => route(), (e) => (e instanceof Unauthorized ? showLogin('') : route()));
}());
