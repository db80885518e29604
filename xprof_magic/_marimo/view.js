// The view of a run under a marimo cell: its summary, a runs / tool / host choice and
// XProf's page. The state lives in Python (xprof_magic/_marimo/view.py); this draws it and
// sends back what the person picks. It shows what the Jupyter widget shows: the summary
// whole, a tool with nothing for the run as one line in place of its page (the frame
// shrinks to it), the trace viewer's line while it waits for its window, a line under a
// page still loading after a while, and one under a page that draws charts where Google's
// chart library cannot load.

const WRAPPER =
  "<!doctype html><html><head><style>html,body{margin:0;height:100%;overflow:hidden}" +
  "iframe{border:0;width:100%;height:100%}</style>" +
  // XProf's page calls history.pushState on its parent; here that parent is this wrapper.
  "<script>history.pushState=history.replaceState=function(){};</script></head><body>" +
  "<iframe class='xprof-inner' name='NAME' allow='clipboard-write; fullscreen'></iframe>" +
  "</body></html>";

function element(tag, className, parent, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function choice(parent, name, className) {
  const label = element("label", `xprof-choice ${className}`, parent);
  element("span", "", label, name);
  return element("select", "", label);
}

// Options as [value, label] pairs; rebuilt only when they changed, so a pick stays put.
function fill(select, options, value) {
  const same =
    select.options.length === options.length &&
    options.every(([v, l], i) => select.options[i].value === v && select.options[i].text === l);
  if (!same) {
    select.replaceChildren(
      ...options.map(([v, l]) => {
        const option = document.createElement("option");
        option.value = v;
        option.text = l;
        return option;
      }),
    );
  }
  select.value = value;
}

// The kernel route's end in the view: requests as custom messages, replies in chunks
// (xprof_magic/_viewer/process/route.py, serve); the wrapper frame finds it as the
// `xprofRoute` of the view's `.xprof-route` element.
function kernelRoute(model) {
  const pending = new Map();
  let next = 0;
  model.on("msg:custom", (msg, buffers) => {
    const asked = msg && msg.type === "xprof-answer" ? pending.get(msg.id) : null;
    if (!asked) return;
    if (msg.taken && asked.taken) asked.taken();
    if (msg.head) asked.head = msg.head;
    for (const b of buffers || []) {
      asked.parts.push(
        b instanceof ArrayBuffer ? new Uint8Array(b) : new Uint8Array(b.buffer, b.byteOffset, b.byteLength),
      );
    }
    if (msg.last) {
      pending.delete(msg.id);
      const head = asked.head || { status: 502, reason: "Bad Gateway", headers: {} };
      asked.resolve({ ...head, body: new Blob(asked.parts) });
    }
  });
  return {
    ask(path, taken) {
      return new Promise((resolve, reject) => {
        const id = ++next;
        pending.set(id, { resolve, reject, taken, parts: [], head: null });
        model.send({ type: "xprof-ask", id, path });
      });
    },
  };
}

function render({ model, el }) {
  const notes = model.get("notes");
  const id = Math.random().toString(36).slice(2, 14);
  const root = element("div", "xprof-view", el);
  root.dataset.xprofFrame = id;
  const controls = element("div", "xprof-controls", root);
  const runs = choice(controls, "Run", "xprof-runs");
  const tools = choice(controls, "Tool", "xprof-tools");
  const hosts = choice(controls, "Host", "xprof-hosts");
  const refresh = element("button", "xprof-refresh", controls, "↻ Refresh");
  refresh.title = "Look for runs written elsewhere";
  const open = element("a", "xprof-open", controls, "open in new tab ↗");
  open.target = "_blank";
  open.rel = "noopener";
  const status = element("div", "xprof-status", root);
  const panel = element("details", "xprof-summary-panel", root);
  panel.open = true;
  element("summary", "", panel, "Summary");
  const summary = element("div", "xprof-summary", panel);
  const area = element("div", "xprof-page-area", root);
  const empty = element("div", "xprof-empty", area);
  const outer = element("iframe", "xprof-outer", area);
  // The route from this browser to the viewer (xprof_magic/_viewer/process/route_page.js).
  outer.srcdoc = WRAPPER.replace("NAME", `xprof-${id}`).replace(
    "</body>",
    () => `<script>${notes.page_js || ""}<\/script></body>`,
  );
  const relay = element("div", "xprof-route", root);
  relay.hidden = true;
  relay.xprofRoute = kernelRoute(model);
  const under = element("div", "xprof-note xprof-under", area);
  const chartsNote = element("div", "xprof-note xprof-charts-note", area, notes.charts_note);
  const slow = element("div", "xprof-note xprof-busy", area);
  let loaded = false;
  let shown = null;
  let routeLine = "";
  let charts = null; // null: not asked yet; "asking", "ok" or "blocked"
  let timer = null;

  const pick = (select, trait) =>
    select.addEventListener("change", () => {
      model.set(trait, select.value);
      model.save_changes();
    });
  pick(runs, "run");
  pick(tools, "tool");
  pick(hosts, "host");
  refresh.addEventListener("click", () => {
    model.set("refreshed", model.get("refreshed") + 1);
    model.save_changes();
  });

  const calm = () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
    slow.hidden = true;
  };
  const inner = () => loaded && outer.contentDocument?.querySelector("iframe.xprof-inner");
  // XProf's embedded pages tell their parent (the wrapper) when a loading indicator shows.
  const busy = (event) => {
    const frame = inner();
    const m = event.data;
    if (!frame || event.source !== frame.contentWindow || !m || m.type !== notes.busy_type) {
      return;
    }
    if (!m.busy) {
      calm();
      return;
    }
    if (timer === null) {
      timer = setTimeout(() => {
        slow.textContent = model.get("busy");
        slow.hidden = false;
      }, notes.busy_ms);
    }
  };
  // The line in place of the page: a tool with nothing for the run (the frame shrinks to
  // it), or the trace viewer waiting for its window (the line keeps the frame's height).
  const instead = () => model.get("empty") || model.get("wait");
  const marks = () => {
    const line = instead() || routeLine;
    empty.textContent = line;
    empty.hidden = !line;
    empty.style.minHeight = model.get("wait") ? `${model.get("height")}px` : "";
    chartsNote.hidden = !(model.get("charts") && !line && charts === "blocked");
    under.textContent = line ? "" : model.get("under");
    under.hidden = !under.textContent;
  };
  // A new selection changes the inner page's address; the frames themselves stay.
  const point = () => {
    const src = model.get("src");
    const line = instead();
    outer.hidden = !src || !!line || !!routeLine;
    outer.style.height = `${model.get("height")}px`;
    const frame = inner();
    const target = line ? "about:blank" : src;
    if (frame && target && shown !== target) {
      calm();
      go(frame, target);
    }
    if (model.get("charts") && charts === null) {
      charts = "asking";
      fetch(notes.charts_url, { mode: "no-cors", cache: "force-cache" }).then(
        () => {
          charts = "ok";
        },
        () => {
          charts = "blocked";
          marks();
        },
      );
    }
    marks();
  };
  outer.addEventListener("load", () => {
    loaded = true;
    outer.contentWindow.addEventListener("message", busy);
    point();
  });
  const say = (line) => {
    const port = notes.base ? new URL(notes.base, document.baseURI).port : "";
    const name = tools.options[tools.selectedIndex]?.text || "this tool";
    routeLine = line ? line.replace("{name}", name).replaceAll("{port}", port) : "";
    point();
    marks();
  };
  const waits = (on) => {
    slow.textContent = notes.lines.busy;
    slow.hidden = !on;
  };
  // The frame goes to a page once the route from this browser is known: the port, else
  // the kernel (any of XProf's pages), else a line; never the browser's error page.
  const go = (frame, target) => {
    shown = target;
    routeLine = "";
    const route = outer.contentWindow.xprofRoute;
    if (target === "about:blank" || !route || !notes.base) {
      frame.removeAttribute("srcdoc");
      frame.setAttribute("src", target);
      return;
    }
    const kernel = notes.kernel !== false;
    const page = { base: notes.base, route: notes.route, version: notes.version, kernel };
    route.choose(page).then((chosen) => {
      outer.contentDocument.body.dataset.route = chosen;
      open.style.visibility = chosen === "direct" ? "" : "hidden";
      if (shown !== target) return;
      if (chosen === "direct") {
        frame.removeAttribute("srcdoc");
        frame.setAttribute("src", target);
      } else if (chosen === "none") say(notes.lines.none);
      else if (!kernel) say(notes.lines.port_only);
      else
        route.load(frame, page, target, waits).catch((e) => {
          if (shown === target) say(notes.lines.failed.replace("{error}", String(e?.message || e)));
        });
    });
  };
  const draw = () => {
    fill(runs, model.get("runs"), model.get("run"));
    fill(tools, model.get("tools"), model.get("tool"));
    tools.parentElement.classList.toggle("xprof-surveyed", model.get("surveyed"));
    const hostList = model.get("hosts");
    fill(hosts, hostList.map((h) => [h, h]), model.get("host"));
    hosts.parentElement.hidden = hostList.length < 2;
    const full = model.get("full");
    open.hidden = !full;
    if (full) open.href = full;
    status.textContent = model.get("status");
    status.hidden = !model.get("status");
    point();
  };
  const drawSummary = () => {
    summary.innerHTML = model.get("summary");
  };
  const traits = [
    "runs",
    "run",
    "tools",
    "tool",
    "hosts",
    "host",
    "full",
    "status",
    "src",
    "height",
    "empty",
    "wait",
    "under",
    "charts",
    "surveyed",
  ];
  for (const trait of traits) model.on(`change:${trait}`, draw);
  model.on("change:summary", drawSummary);
  draw();
  drawSummary();
  return () => {
    calm();
    for (const trait of traits) model.off(`change:${trait}`, draw);
    model.off("change:summary", drawSummary);
  };
}

export default { render };
