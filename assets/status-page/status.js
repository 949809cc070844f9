// pgrelay status page: follows /status/stream (Server-Sent Events) and keeps the page current.
// A `snapshot` (on every connect and reconnect) replaces the whole state; a `tick` each second adds
// one sample to the charts and replaces the other figures. Every string from the server goes in
// through textContent: the relay's name and description are the operator's, not ours to trust.
(function () {
  'use strict';

  var MAX_POINTS = 600;      // ten minutes of one-second samples, as the relay keeps
  var RATE_WINDOW = 10;      // the counters show the average of the last 10 samples: steadier than one second
  var STALE_MS = 5000;       // no message for this long = not live, even if the stream looks open
  var STALL_MS = 20000;      // ... and for this long: drop the stream (a proxy may hold a dead one) and reconnect
  var RETRY_MS = 5000;       // EventSource gives up for good on an HTTP error (a proxy's 502): retry ourselves

  // Names for the kinds an operator is likely to see; the others show their number.
  var KIND_NAMES = {
    0: 'Profile metadata', 1: 'Short text note', 3: 'Follow list', 4: 'Encrypted DM', 5: 'Deletion request',
    6: 'Repost', 7: 'Reaction', 8: 'Badge award', 16: 'Generic repost', 40: 'Channel creation',
    42: 'Channel message', 1059: 'Gift wrap', 1063: 'File metadata', 1111: 'Comment', 1984: 'Report',
    9734: 'Zap request', 9735: 'Zap receipt', 10000: 'Mute list', 10002: 'Relay list', 30023: 'Long-form article',
    30078: 'App data', '-1': 'All other kinds'
  };

  var $ = function (id) { return document.getElementById(id); };
  var integer = new Intl.NumberFormat();
  var oneDecimal = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  var compact = new Intl.NumberFormat(undefined, { notation: 'compact', maximumFractionDigits: 1 });
  var clockMinutes = new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit' });
  var clockSeconds = new Intl.DateTimeFormat(undefined, { hour: 'numeric', minute: '2-digit', second: '2-digit' });

  var history = { t: [], eventsIn: [], eventsOut: [], reqs: [] };
  var haveSnapshot = false;
  var relayUrl;              // RELAY_URL, when the operator set it (sent with each snapshot)
  var startedAt = 0;
  var clockOffset = 0;       // server clock minus ours, so uptime does not depend on the viewer's clock
  var source = null;         // the EventSource
  var openedAt = 0;          // when it was created
  var lastMessageAt = 0;
  var charts = [];

  // --- formatting ---------------------------------------------------------------------------------

  function isNumber(v) { return typeof v === 'number' && isFinite(v); }
  function fmtCount(v) { return isNumber(v) ? integer.format(v) : '–'; }
  function fmtRate(v) { return isNumber(v) ? (v >= 100 ? integer.format(Math.round(v)) : oneDecimal.format(v)) : '–'; }
  function fmtMs(v) { return isNumber(v) ? (v < 10 ? oneDecimal.format(v) : integer.format(Math.round(v))) : '–'; }
  function fmtBytes(v) {
    if (!isNumber(v)) return '–';
    var units = ['B', 'kB', 'MB', 'GB', 'TB'];
    var i = 0;
    while (v >= 1000 && i < units.length - 1) { v /= 1000; i++; }
    return (i === 0 ? integer.format(v) : oneDecimal.format(v)) + ' ' + units[i];
  }
  function fmtDuration(seconds) {
    var s = Math.max(0, Math.floor(seconds));
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d > 0) return d + ' d ' + h + ' h';
    if (h > 0) return h + ' h ' + m + ' min';
    if (m > 0) return m + ' min' + (s % 60 ? ' ' + (s % 60) + ' s' : '');
    return s + ' s';
  }
  function httpUrl(value) {
    if (typeof value !== 'string' || value === '') return null;
    try {
      var url = new URL(value, location.href);
      return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : null;
    } catch (e) { return null; }
  }

  // Sets a counter's text and its raw value (data-value: for scripts and tests, not for people).
  function show(id, text, value) {
    var el = $(id);
    el.textContent = text;
    el.dataset.value = value === undefined || value === null ? '' : String(value);
  }

  function element(tag, className, text) {
    var el = document.createElement(tag);
    if (className) el.className = className;
    if (text !== undefined) el.textContent = text;
    return el;
  }

  // --- live state ---------------------------------------------------------------------------------

  function setLive(state, text) {
    var live = $('live');
    if (live.dataset.state === state && live.textContent === text) return; // role=status: announce changes only
    live.dataset.state = state;
    live.textContent = text;
    document.body.dataset.state = state;
  }

  function connect() {
    if (source) source.close();
    haveSnapshot = false; // ticks wait for the new stream's snapshot
    openedAt = Date.now();
    var stream = source = new EventSource('/status/stream');
    stream.addEventListener('snapshot', function (e) { receive(e, applySnapshot); });
    stream.addEventListener('tick', function (e) { if (haveSnapshot) receive(e, applyTick); });
    stream.onerror = function () {
      haveSnapshot = false; // EventSource reconnects by itself, and the server then starts with a snapshot
      var closed = stream.readyState === EventSource.CLOSED; // for good: the watchdog below retries
      setLive('disconnected', closed ? 'Disconnected' : 'Disconnected, reconnecting…');
    };
  }

  function receive(e, apply) {
    var data;
    try { data = JSON.parse(e.data); } catch (err) { return; }
    lastMessageAt = Date.now();
    apply(data);
    setLive('live', 'Live');
  }

  // Once a second: a stream that went quiet stops calling itself live and is replaced in time, and
  // the uptime moves on. Disconnected, nobody knows whether the relay is up: say how old the figures are.
  setInterval(function () {
    var quiet = Date.now() - Math.max(lastMessageAt, openedAt);
    if (haveSnapshot && quiet > STALE_MS) setLive('disconnected', 'No updates');
    if (quiet > (source.readyState === EventSource.CLOSED ? RETRY_MS : STALL_MS)) connect();
    var uptime = $('uptime');
    if ($('live').dataset.state === 'live' && startedAt) {
      uptime.textContent = 'up ' + fmtDuration((Date.now() + clockOffset - startedAt) / 1000);
    } else if (lastMessageAt) {
      uptime.textContent = 'last update ' + fmtDuration((Date.now() - lastMessageAt) / 1000) + ' ago';
    }
  }, 1000);

  // --- applying data ------------------------------------------------------------------------------

  function applySnapshot(s) {
    haveSnapshot = true;
    startedAt = s.startedAt || 0;
    if (isNumber(s.now)) clockOffset = s.now - Date.now();
    var h = s.history || {};
    history = { t: [], eventsIn: [], eventsOut: [], reqs: [] };
    Object.keys(history).forEach(function (key) {
      history[key] = Array.isArray(h[key]) ? h[key].slice(-MAX_POINTS) : [];
    });
    relayUrl = s.relayUrl;
    renderRelay(s.relay || {});
    if (startedAt) $('uptime').title = 'started ' + new Date(startedAt).toLocaleString();
    renderFigures(s);
  }

  function applyTick(tick) {
    if (isNumber(tick.now)) clockOffset = tick.now - Date.now();
    var sample = tick.sample;
    if (sample && isNumber(sample.t)) {
      var last = history.t.length - 1;
      // A repeated second replaces its point rather than drawing a step back in time.
      var at = last >= 0 && history.t[last] >= sample.t ? last : history.t.length;
      ['t', 'eventsIn', 'eventsOut', 'reqs'].forEach(function (key) {
        history[key][at] = isNumber(sample[key]) ? sample[key] : 0;
        if (history[key].length > MAX_POINTS) history[key].splice(0, history[key].length - MAX_POINTS);
      });
    }
    renderFigures(tick);
  }

  // The average rate over the last RATE_WINDOW samples (fewer just after start).
  function recentRate(values) {
    var recent = values.slice(-RATE_WINDOW);
    if (recent.length === 0) return null;
    return recent.reduce(function (a, b) { return a + b; }, 0) / recent.length;
  }

  function renderFigures(s) {
    var totals = s.totals || {};
    var rateIn = recentRate(history.eventsIn), rateOut = recentRate(history.eventsOut), rateReqs = recentRate(history.reqs);
    show('in-rate', fmtRate(rateIn), rateIn);
    show('out-rate', fmtRate(rateOut), rateOut);
    show('req-rate', fmtRate(rateReqs), rateReqs);
    show('in-total', fmtCount(totals.eventsIn), totals.eventsIn);
    show('out-total', fmtCount(totals.eventsOut), totals.eventsOut);
    show('req-total', fmtCount(totals.reqs), totals.reqs);
    show('connections', fmtCount(s.connections), s.connections);
    show('subscriptions', fmtCount(s.subscriptions) + (s.subscriptions === 1 ? ' subscription' : ' subscriptions'), s.subscriptions);

    var db = s.database;
    if (db && isNumber(db.sizeBytes)) {
      show('db-size', fmtBytes(db.sizeBytes), db.sizeBytes);
      // The count is PostgreSQL's estimate, which stays 0 until the table is first analyzed: while
      // the relay has plainly stored events, "≈ 0" would mislead.
      var storedSinceStart = (s.kinds || []).reduce(function (n, k) { return n + (k.count || 0); }, 0);
      if (isNumber(db.events) && (db.events > 0 || storedSinceStart === 0)) {
        show('db-events', '≈ ' + fmtCount(db.events) + ' events stored', db.events);
      } else {
        show('db-events', 'event count pending', null);
      }
    } else {
      show('db-size', '–', null);
      show('db-events', 'not measured yet', null);
    }

    // Reported events and pubkeys awaiting an admin (NIP-56 reports from trusted reporters).
    var queue = s.moderationQueue;
    if (queue && isNumber(queue.events) && isNumber(queue.pubkeys)) {
      show('queue-total', fmtCount(queue.events + queue.pubkeys), queue.events + queue.pubkeys);
      show('queue-detail', fmtCount(queue.events) + (queue.events === 1 ? ' event, ' : ' events, ') + fmtCount(queue.pubkeys) + (queue.pubkeys === 1 ? ' pubkey' : ' pubkeys'), null);
    } else {
      show('queue-total', '–', null);
      show('queue-detail', 'awaiting review', null);
    }

    var latency = s.latency || {};
    renderLatency('latency-req', latency.req);
    renderLatency('latency-ok', latency.ok);
    renderKinds(Array.isArray(s.kinds) ? s.kinds : []);
    renderPlugin(s.writePlugin);
    renderWebOfTrust(s.webOfTrust);
    updateCharts();
  }

  // The write-policy plugin: only sent when one is configured.
  function renderPlugin(p) {
    var card = $('plugin');
    card.hidden = !p;
    if (!p) return;
    var state = p.running ? 'running' + (isNumber(p.pid) ? ' (pid ' + p.pid + ')' : '') : 'not running';
    var pairs = [
      ['Command', String(p.command)],
      ['State', state],
      ['Events awaiting it', fmtCount(p.inFlight)],
      ['Restarts', fmtCount(p.restarts)],
    ];
    if (typeof p.lastError === 'string') pairs.push(['Last error', p.lastError]);
    fillPairs($('plugin-state'), pairs);
  }

  // The web of trust: only sent when WOT_ROOTS is set.
  function renderWebOfTrust(w) {
    var card = $('wot');
    card.hidden = !w;
    if (!w) return;
    var computed = isNumber(w.computedAt) && w.computedAt > 0 ? fmtDuration((Date.now() - w.computedAt) / 1000) + ' ago, in ' + fmtMs(w.durationMs) + ' ms' : 'not yet';
    fillPairs($('wot-state'), [
      ['Members', fmtCount(w.members)],
      ['Computed', computed],
      ['Events refused', fmtCount(w.refusals)],
    ]);
  }

  function renderLatency(rowId, l) {
    var cells = $(rowId).querySelectorAll('td');
    l = l || {};
    cells[0].textContent = fmtMs(l.p50);
    cells[1].textContent = fmtMs(l.p95);
    cells[2].textContent = fmtMs(l.p99);
    cells[3].textContent = isNumber(l.n) ? integer.format(l.n) : '–';
  }

  function renderKinds(kinds) {
    var max = kinds.reduce(function (m, k) { return Math.max(m, k.count || 0); }, 0);
    var items = kinds.filter(function (k) { return isNumber(k.kind) && isNumber(k.count); }).map(function (k) {
      var li = element('li');
      li.dataset.kind = String(k.kind);
      li.dataset.count = String(k.count);
      var bar = element('span', 'bar');
      bar.style.width = (max > 0 ? (100 * k.count) / max : 0).toFixed(1) + '%';
      var label = element('span', 'kind-name', KIND_NAMES[k.kind] || 'Kind ' + k.kind);
      if (KIND_NAMES[k.kind] && k.kind >= 0) label.append(' ', element('span', 'kind-number', 'kind ' + k.kind));
      li.append(bar, label, element('span', 'kind-count', fmtCount(k.count)));
      return li;
    });
    $('kinds').replaceChildren.apply($('kinds'), items);
  }

  // The NIP-11 document: sent with every snapshot, so a change of name shows after a restart.
  function renderRelay(relay) {
    var name = typeof relay.name === 'string' && relay.name.trim() ? relay.name : 'Nostr relay';
    $('relay-name').textContent = name;
    document.title = name + ' · status';
    $('relay-description').textContent = typeof relay.description === 'string' ? relay.description : '';

    var icon = $('relay-icon');
    var iconUrl = httpUrl(relay.icon);
    icon.onerror = function () { icon.onerror = null; icon.src = '/status/favicon.svg'; };
    icon.src = iconUrl || '/status/favicon.svg';

    var about = [];
    about.push(['Connect', element('code', null, window.relayConnectUrl(relayUrl, location))]);
    var software = httpUrl(relay.software);
    if (software) {
      var link = element('a', null, software.replace(/^https?:\/\//, ''));
      link.href = software;
      link.rel = 'noopener noreferrer';
      about.push(['Software', link]);
    } else if (relay.software) {
      about.push(['Software', String(relay.software)]);
    }
    if (relay.version) about.push(['Version', String(relay.version)]);
    if (relay.pubkey) about.push(['Operator pubkey', element('code', null, String(relay.pubkey))]);
    if (relay.contact) about.push(['Contact', String(relay.contact)]);
    fillPairs($('about'), about);

    // The footer names the software by its URL's last segment ("…/pgrelay/pgrelay" → pgrelay).
    var softwareName = software ? new URL(software).pathname.split('/').filter(Boolean).pop() : '';
    $('software').textContent = ((softwareName || 'pgrelay') + ' ' + (relay.version || '')).trim();

    var nips = (Array.isArray(relay.supported_nips) ? relay.supported_nips : []).filter(function (n) {
      return Number.isInteger(n) && n >= 0;
    });
    $('nips').replaceChildren.apply($('nips'), nips.map(function (n) {
      var padded = n < 10 ? '0' + n : String(n);
      var a = element('a', null, 'NIP-' + padded);
      a.href = 'https://github.com/nostr-protocol/nips/blob/master/' + padded + '.md';
      a.rel = 'noopener noreferrer';
      var li = element('li');
      li.append(a);
      return li;
    }));

    var limitation = relay.limitation && typeof relay.limitation === 'object' ? relay.limitation : {};
    fillPairs($('limits'), Object.keys(limitation).map(function (key) {
      return [key.replace(/_/g, ' '), limitValue(key, limitation[key])];
    }));
  }

  function limitValue(key, v) {
    if (typeof v === 'boolean') return v ? 'yes' : 'no';
    if (isNumber(v)) {
      if (/^created_at_/.test(key)) return fmtDuration(v);
      if (key === 'max_message_length') return fmtBytes(v);
      return integer.format(v);
    }
    return typeof v === 'string' ? v : JSON.stringify(v);
  }

  function fillPairs(dl, pairs) {
    var nodes = [];
    pairs.forEach(function (pair) {
      var dd = element('dd');
      dd.append(pair[1]); // a string is appended as text, never parsed as HTML
      nodes.push(element('dt', null, pair[0]), dd);
    });
    dl.replaceChildren.apply(dl, nodes);
  }

  // --- charts -------------------------------------------------------------------------------------

  var CHARTS = [
    { id: 'chart-events', series: [['eventsIn', 'in', '--in'], ['eventsOut', 'out', '--out']] },
    { id: 'chart-reqs', series: [['reqs', 'REQ + COUNT', '--reqs']] }
  ];

  function cssColor(name) { return getComputedStyle(document.documentElement).getPropertyValue(name).trim(); }
  function withAlpha(hex, alpha) {
    var m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex);
    return m ? 'rgba(' + parseInt(m[1], 16) + ',' + parseInt(m[2], 16) + ',' + parseInt(m[3], 16) + ',' + alpha + ')' : hex;
  }
  // A y range from 0 to a round number just above the data, so the peak nearly fills the chart.
  function roundUp(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v)));
    return [1, 1.5, 2, 3, 4, 5, 6, 8, 10].map(function (f) { return f * p; }).find(function (c) { return c >= v * 1.05; }) || 10 * p;
  }

  function chartHeight() { return window.innerWidth < 600 ? 170 : 210; }

  function createCharts() {
    charts.forEach(function (c) { c.plot.destroy(); });
    charts = [];
    if (typeof uPlot === 'undefined') {
      CHARTS.forEach(function (def) { $(def.id).querySelector('.chart-empty').textContent = 'Charts unavailable (uPlot did not load)'; });
      return;
    }
    var axis = {
      stroke: cssColor('--muted'),
      grid: { stroke: cssColor('--grid'), width: 1 },
      ticks: { stroke: cssColor('--grid'), width: 1 }
    };
    CHARTS.forEach(function (def) {
      var el = $(def.id);
      // Off the chart, the legend shows the latest second rather than dashes.
      var latest = function (u, v, seriesIdx) {
        var column = u.data[seriesIdx];
        return v === null || v === undefined ? (column.length ? column[column.length - 1] : null) : v;
      };
      var series = [{
        label: 'Time',
        value: function (u, v) { return v === null || v === undefined ? 'last second' : new Date(v).toLocaleTimeString(); }
      }].concat(def.series.map(function (s) {
        var color = cssColor(s[2]);
        return {
          label: s[1], stroke: color, fill: withAlpha(color, 0.12), width: 2,
          points: { show: false },
          value: function (u, v, seriesIdx) { var x = latest(u, v, seriesIdx); return x === null ? '–' : fmtRate(x) + '/s'; }
        };
      }));
      var opts = {
        width: Math.max(200, el.clientWidth), height: chartHeight(),
        ms: 1,  // the relay's timestamps are milliseconds
        cursor: { drag: { x: false, y: false } }, // no zoom: the window always ends now
        scales: {
          // At least a minute wide, so the first seconds after a start do not fill the whole width.
          x: { time: true, range: function (u, min, max) { return [Math.min(min, max - 60000), max]; } },
          // Counts per second are whole numbers: at least 0..5, never ticks at 0.25.
          y: { range: function (u, min, max) { return [0, Math.max(5, roundUp(max))]; } }
        },
        axes: [
          // One row of plain times, spaced for a phone (uPlot's default adds a second row with the
          // date, which collides on narrow charts).
          Object.assign({}, axis, {
            space: 70,
            size: 36,
            values: function (u, splits, axisIdx, space, incr) {
              var format = incr < 60000 ? clockSeconds : clockMinutes;
              return splits.map(function (t) { return format.format(t); });
            }
          }),
          Object.assign({}, axis, { size: 48, values: function (u, splits) { return splits.map(function (v) { return compact.format(v); }); } })
        ],
        series: series
      };
      charts.push({ def: def, el: el, plot: new uPlot(opts, chartData(def), el) });
    });
    updateCharts();
  }

  function chartData(def) {
    return [history.t].concat(def.series.map(function (s) { return history[s[0]]; }));
  }

  function updateCharts() {
    charts.forEach(function (c) {
      c.plot.setData(chartData(c.def));
      var total = c.def.series.reduce(function (sum, s) {
        return sum + history[s[0]].reduce(function (a, b) { return a + b; }, 0);
      }, 0);
      c.el.dataset.points = String(history.t.length);
      c.el.dataset.empty = total > 0 ? 'false' : 'true';
    });
  }

  // Charts follow their card's width (window resizes, phone rotation) and the colour scheme.
  if (typeof ResizeObserver !== 'undefined') {
    var resizing = 0;
    new ResizeObserver(function () {
      cancelAnimationFrame(resizing);
      resizing = requestAnimationFrame(function () {
        charts.forEach(function (c) { c.plot.setSize({ width: Math.max(200, c.el.clientWidth), height: chartHeight() }); });
      });
    }).observe(document.querySelector('main'));
  }
  window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', createCharts);

  createCharts();
  connect();
})();
