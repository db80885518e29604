// The route from this browser to the viewer, in the widget's wrapper frame: chosen once per
// frame (the viewer's port when its health route answers within PROBE_MS, else the kernel
// route, else a line), and XProf's pages loaded through the kernel (the trace viewer, and
// the Angular app of every other tool). Why this way, not a service worker:
// xprof_magic/_notebook/route.py.
window.xprofRoute = (function () {
  var PROBE_MS = 1000, BUSY_MS = 1500, FIND_MS = 3000, HEALTH = '/xprof_magic/health';
  var holder = window.frameElement, choosing = null, cache = null, waiting = 0;
  var current = null;
  // The page's own location, read or moved: a stand-in (the page is about:srcdoc).
  var LOCATION =
    /(^|[^.\w$])(?:window\.|document\.)?location\??\.(href|origin|search|pathname|hash|host)\b/g;
  var MOVES = /(^|[^.\w$])(?:window\.)?location\.(replace|assign)\(/g;
  var RELOAD = /(^|[^.\w$])(?:window\.)?location\.reload\(\)/g;
  // The location itself, kept (Angular's platform location: `this._location=window.location`),
  // and the history the page moves in (Angular's router, XProf's own replaceState): stand-ins
  // too, so that XProf's Angular tools route on the viewer's URL, not about:srcdoc.
  var WHOLE = /(^|[^.\w$])window\.location(?=\s*[,;)}\]])/g;
  var HISTORY = /(^|[^.\w$])(?:window\.history\b|history(?=\.(?:pushState|replaceState)\b))/g;
  // The window's origin (the graph viewer builds its frame's URL on it), and a frame's
  // location moved by the page (the graph viewer's `frame.contentWindow.location.replace`).
  var ORIGIN = /(^|[^.\w$])window\.origin\b/g;
  var FRAME_LOCATION =
    /(?<=[^\w$.?]|^)([\w$]+(?:\??\.[\w$]+)*?)\??\.contentWindow\??\.location\b/g;
  var URLS = /url\((["']?)([^)"']+)\1\)/g;
  var REFS = /(<script\b[^>]*\bsrc=|<link\b[^>]*\bhref=)(["'])([^"']+)\2/gi;
  function relay() {
    var box = holder && holder.closest('.xprof-viewer, .xprof-view');
    var el = box && box.querySelector('.xprof-route');
    return el && el.xprofRoute ? el.xprofRoute : null;
  }
  function found(ms) {
    return new Promise(function (resolve) {
      var t0 = Date.now();
      (function look() {
        var r = relay();
        if (r || Date.now() - t0 > ms) resolve(r); else setTimeout(look, 100);
      })();
    });
  }
  function probe(url) {
    return new Promise(function (resolve) {
      var timer = setTimeout(function () { resolve(false); }, PROBE_MS);
      fetch(url, {mode: 'no-cors', cache: 'no-store', credentials: 'omit'}).then(
        function () { clearTimeout(timer); resolve(true); },
        function () { clearTimeout(timer); resolve(false); });
    });
  }
  function choose(page) {
    if (!choosing) {
      var direct = page.route === 'kernel' ? Promise.resolve(false)
        : page.route === 'direct' ? Promise.resolve(true) : probe(page.base + HEALTH);
      choosing = direct.then(function (ok) {
        if (ok) return 'direct';
        return found(FIND_MS).then(function (r) { return r ? 'kernel' : 'none'; });
      });
    }
    return choosing;
  }
  function store() {
    if (cache === null) {
      cache = window.caches ? caches.open('xprof-magic').catch(function () { return null; })
        : Promise.resolve(null);
    }
    return cache;
  }
  function collapse(url) {
    return url.replace(/^([a-z]+:\/\/[^/?#]*)([^?#]*)/i, function (all, origin, path) {
      return origin + path.replace(/\/{2,}/g, '/');
    }).split('#')[0];
  }
  // The path below the viewer's root that `url` names, or null if it is not the viewer's.
  function within(url, base) {
    url = collapse(url);
    return url.indexOf(base + '/') === 0 ? url.slice(base.length) : null;
  }
  var asked = [];
  async function ask(page, path, busy) {
    var kept = page.version && path.indexOf('?') < 0 && /\.(js|css|woff2?|wasm)$/.test(path);
    var key = 'https://xprof-magic.invalid/' + encodeURIComponent(page.version) + path;
    var c = kept ? await store() : null;
    var hit = c ? await c.match(key) : null;
    if (hit) return hit;
    asked.push(path.split('?')[0]);
    var r = relay();
    if (!r) throw new Error('the kernel route is gone');
    var taken = false;
    function took() { if (!taken) { taken = true; waiting -= 1; busy(waiting > 0); } }
    waiting += 1;
    var timer = setTimeout(function () { if (!taken) busy(true); }, BUSY_MS);
    var got;
    try { got = await r.ask(path, took); } finally { clearTimeout(timer); took(); }
    var headers = new Headers(got.headers), body = got.body;
    if (headers.get('content-encoding') === 'gzip') {
      body = await new Response(body.stream().pipeThrough(new DecompressionStream('gzip'))).blob();
    }
    headers.delete('content-encoding');
    headers.delete('content-length');
    var empty = [101, 204, 205, 304].indexOf(got.status) >= 0;
    var reply = new Response(empty ? null : body,
      {status: got.status, statusText: got.reason, headers: headers});
    if (c && got.status === 200) await c.put(key, reply.clone());
    return reply;
  }
  function relocate(text) {
    text = text.replace(MOVES, '$1__xprofGo(').replace(RELOAD, '$1__xprofGo(__xprofLoc.href)')
      .replace(LOCATION, '$1__xprofLoc.$2').replace(WHOLE, '$1__xprofLoc')
      .replace(HISTORY, '$1__xprofHistory').replace(ORIGIN, '$1__xprofLoc.origin');
    // The costliest pattern, on 2.8 MB scripts: only where it can match.
    return text.indexOf('.contentWindow') < 0 ? text
      : text.replace(FRAME_LOCATION, '__xprofFrameLoc($1)');
  }
  // A file of the viewer's as a blob: URL of this origin: a script with its location read
  // from the stand-in, a style sheet with the files it names (its fonts) made blobs too.
  async function blobOf(page, path, busy, url) {
    var one = await ask(page, path, busy);
    if (!one.ok) return null;
    if (/\.js$/.test(path)) {
      return URL.createObjectURL(new Blob([relocate(await one.text())], {type: 'text/javascript'}));
    }
    if (!/\.css$/.test(path)) return URL.createObjectURL(await one.blob());
    var css = await one.text(), refs = {}, m;
    URLS.lastIndex = 0;
    while ((m = URLS.exec(css))) refs[m[2]] = true;
    var base = collapse(new URL(page.base, document.baseURI).href), made = {};
    await Promise.all(Object.keys(refs).map(async function (ref) {
      var inner = ref.indexOf('data:') === 0 ? null : within(new URL(ref, url).href, base);
      if (inner !== null) made[ref] = await blobOf(page, inner, busy, url);
    }));
    css = css.replace(URLS, function (all, q, ref) { return made[ref] ? 'url(' + made[ref] + ')' : all; });
    return URL.createObjectURL(new Blob([css], {type: 'text/css'}));
  }
  // The page at `target` (a URL of the viewer's, as the port route would open it) written
  // into `inner`: its scripts and style sheets as blob: URLs, its requests to the viewer
  // answered through the kernel (SHIM), its URL read from a stand-in (__xprofLoc).
  async function load(inner, page, target, busy) {
    current = {page: page, busy: busy};
    var url = collapse(new URL(target, document.baseURI).href);
    var base = collapse(new URL(page.base, document.baseURI).href);
    var reply = await ask(page, within(url, base), busy);
    if (!reply.ok) throw new Error('the viewer answered ' + reply.status + ': ' +
      (await reply.text()).slice(0, 200));
    var html = relocate(await reply.text()), refs = [], m, made = {};
    REFS.lastIndex = 0;
    while ((m = REFS.exec(html))) refs.push(m[3]);
    await Promise.all(refs.map(async function (ref) {
      var full = new URL(ref, url).href, path = within(full, base);
      if (path === null) return;
      var blob = await blobOf(page, path, busy, full);
      if (blob) made[ref] = blob;
    }));
    (inner.xprofBlobs || []).forEach(function (b) { URL.revokeObjectURL(b); });
    inner.xprofBlobs = Object.keys(made).map(function (k) { return made[k]; });
    html = html.replace(REFS, function (all, head, q, ref) {
      return made[ref] ? head + q + made[ref] + q : all;
    });
    var shim = SHIM.replace('__PAGE__', function () { return JSON.stringify(url); })
      .replace('__BASE__', function () { return JSON.stringify(base); });
    html = html.replace(/<head\b[^>]*>/i, function (h) { return h + '<script>' + shim + '<\/script>'; });
    inner.removeAttribute('src');
    inner.srcdoc = html;
  }
  // Runs first in the page written through the kernel: its URL, and its requests.
  var SHIM = '(' + function (PAGE, BASE) {
    var parentRoute = window.parent.xprofRoute || window.parent.__xprofRoute;
    window.__xprofRoute = parentRoute;
    window.__xprofLoc = new URL(PAGE);
    // The page's history: moves change the stand-in location, nothing else.
    function moved(state, url) {
      window.__xprofHistory.state = state === undefined ? null : state;
      if (url !== undefined && url !== null) window.__xprofLoc.href = new URL(String(url), window.__xprofLoc.href).href;
    }
    window.__xprofHistory = {state: null, length: 1, scrollRestoration: 'auto',
      pushState: function (state, title, url) { moved(state, url); },
      replaceState: function (state, title, url) { moved(state, url); },
      back: function () {}, forward: function () {}, go: function () {}};
    function mine(url) {
      try { return parentRoute.within(new URL(String(url), PAGE).href, BASE); } catch (e) { return null; }
    }
    function asked(path) { return parentRoute.asked(path); }
    // The page moves (XProf's "preparing" page reloads into the timeline), or opens a frame
    // of its own on the viewer (its preview, the graph viewer's): through the kernel too.
    window.__xprofGo = function (url) { parentRoute.open(window.frameElement, new URL(String(url), PAGE).href); };
    // A frame's location as the page moves it: to the viewer through the kernel, else as is.
    window.__xprofFrameLoc = function (frame) {
      var real = frame && frame.contentWindow && frame.contentWindow.location;
      if (!real) return real;
      function go(how) {
        return function (url) {
          if (mine(url) === null) real[how](url);
          else parentRoute.open(frame, new URL(String(url), PAGE).href);
        };
      }
      return {replace: go('replace'), assign: go('assign'), get href() { return real.href; }};
    };
    // The graph viewer's renderer looks for its WebAssembly beside its script, which as a
    // blob: URL has no folder: it is named here (xprof_magic._viewer.app.graph.GRAPH_ROUTE).
    window.__hpcc_wasmFolder = BASE + '/xprof_magic/graph/dist';
    var src = Object.getOwnPropertyDescriptor(HTMLIFrameElement.prototype, 'src');
    Object.defineProperty(HTMLIFrameElement.prototype, 'src', {
      configurable: true, enumerable: true, get: src.get,
      set: function (v) {
        if (mine(v) === null) src.set.call(this, v);
        else parentRoute.open(this, new URL(String(v), PAGE).href);
      },
    });
    // A script the page adds (XProf's Angular app adds its runtime and bundle so): its file
    // through the kernel too.
    var scriptSrc = Object.getOwnPropertyDescriptor(HTMLScriptElement.prototype, 'src');
    Object.defineProperty(HTMLScriptElement.prototype, 'src', {
      configurable: true, enumerable: true, get: scriptSrc.get,
      set: function (v) {
        var el = this, path = mine(v);
        if (path === null) { scriptSrc.set.call(el, v); return; }
        parentRoute.blob(window.frameElement, path, new URL(String(v), PAGE).href).then(
          function (b) { scriptSrc.set.call(el, b || 'data:text/javascript,'); });
      },
    });
    var nativeFetch = window.fetch;
    window.fetch = function (input, init) {
      var url = typeof input === 'string' || input instanceof URL ? input : input.url;
      var path = mine(url), method = (init && init.method) || input.method || 'GET';
      if (path === null) return nativeFetch.apply(this, arguments);
      if (method.toUpperCase() !== 'GET') return Promise.reject(new TypeError('GET only'));
      return asked(path);
    };
    function KernelXHR() {
      this.readyState = 0; this.status = 0; this.statusText = ''; this.responseType = '';
      this.response = null; this.responseText = ''; this.responseURL = ''; this.timeout = 0;
      this.withCredentials = false; this.upload = {addEventListener: function () {}};
      this._on = {}; this._headers = null; this._path = null;
    }
    [KernelXHR, KernelXHR.prototype].forEach(function (o) {
      o.UNSENT = 0; o.OPENED = 1; o.HEADERS_RECEIVED = 2; o.LOADING = 3; o.DONE = 4;
    });
    // Plain listener lists and event objects: the page's Web Components polyfill replaces
    // EventTarget and Event with wrappers that take no object of ours. A listener runs in the
    // zone.js zone it was added in (Angular's, which then updates the view), as zone.js's
    // own patched XMLHttpRequest would run it; zone.js's send asks for the unpatched adder.
    function add(t, f) {
      var z = window.Zone && window.Zone.current, g = z && typeof f === 'function' ? z.wrap(f, 'xhr') : f;
      (this._on[t] = this._on[t] || []).push({f: f, g: g});
    }
    function remove(t, f) {
      this._on[t] = (this._on[t] || []).filter(function (e) { return e.f !== f; });
    }
    KernelXHR.prototype.addEventListener = KernelXHR.prototype.__zone_symbol__addEventListener = add;
    KernelXHR.prototype.removeEventListener = KernelXHR.prototype.__zone_symbol__removeEventListener = remove;
    KernelXHR.prototype._fire = function (type, loaded) {
      var self = this, e = {type: type, target: self, currentTarget: self,
        lengthComputable: !!loaded, loaded: loaded || 0, total: loaded || 0};
      (self._on[type] || []).slice().forEach(function (on) {
        if (typeof on.g === 'function') on.g.call(self, e); else if (on.g) on.g.handleEvent(e);
      });
      var own = self['on' + type];
      if (typeof own === 'function') own.call(self, e);
    };
    KernelXHR.prototype._state = function (s) { this.readyState = s; this._fire('readystatechange'); };
    KernelXHR.prototype.open = function (method, url) {
      this._path = String(method).toUpperCase() === 'GET' ? mine(url) : null;
      this.responseURL = String(url);
      this._state(1);
    };
    KernelXHR.prototype.setRequestHeader = function () {};
    KernelXHR.prototype.overrideMimeType = function () {};
    KernelXHR.prototype.abort = function () { this._aborted = true; };
    KernelXHR.prototype.getResponseHeader = function (name) {
      return this._headers ? this._headers.get(name) : null;
    };
    KernelXHR.prototype.getAllResponseHeaders = function () {
      var out = '';
      if (this._headers) this._headers.forEach(function (v, k) { out += k + ': ' + v + '\r\n'; });
      return out;
    };
    KernelXHR.prototype.send = function () {
      var self = this;
      function failed() {
        self.status = 0; self._state(4); self._fire('error'); self._fire('loadend');
      }
      if (self._path === null) { setTimeout(failed, 0); return; }
      self._fire('loadstart');
      asked(self._path).then(function (reply) {
        return reply.arrayBuffer().then(function (buffer) {
          if (self._aborted) return;
          self.status = reply.status; self.statusText = reply.statusText;
          self._headers = reply.headers;
          self._state(2);
          var type = self.responseType, text = '';
          if (type === '' || type === 'text' || type === 'json') text = new TextDecoder().decode(buffer);
          if (type === '' || type === 'text') { self.responseText = text; self.response = text; }
          else if (type === 'json') { try { self.response = JSON.parse(text); } catch (e) { self.response = null; } }
          else if (type === 'blob') self.response = new Blob([buffer]);
          else self.response = buffer;
          self._state(3);
          self._fire('progress', buffer.byteLength);
          self._state(4);
          self._fire('load', buffer.byteLength);
          self._fire('loadend', buffer.byteLength);
        });
      }).catch(failed);
    };
    window.XMLHttpRequest = KernelXHR;
  }.toString() + ')(__PAGE__, __BASE__);';
  function byPage(path) {
    return current ? ask(current.page, path, current.busy) : Promise.reject(new Error('no page'));
  }
  function blob(frame, path, url) {
    if (!current) return Promise.resolve(null);
    return blobOf(current.page, path, current.busy, url).then(function (b) {
      if (b && frame) (frame.xprofBlobs = frame.xprofBlobs || []).push(b);
      return b;
    });
  }
  function open(frame, url) {
    if (current) load(frame, current.page, url, current.busy).catch(function (e) {
      console.error('xprof_magic: through the kernel', url, e);
    });
  }
  // `log`: the paths asked of the kernel (not the browser's cache), in order, for tests.
  return {choose: choose, load: load, asked: byPage, within: within, open: open, blob: blob,
    log: asked};
})();
