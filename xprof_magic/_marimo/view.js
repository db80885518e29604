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
  outer.srcdoc = WRAPPER.replace("NAME", `xprof-${id}`);
  const under = element("div", "xprof-note xprof-under", area);
  const chartsNote = element("div", "xprof-note xprof-charts-note", area, notes.charts_note);
  const slow = element("div", "xprof-note xprof-busy", area);
  let loaded = false;
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
    const line = instead();
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
    outer.hidden = !src || !!line;
    outer.style.height = `${model.get("height")}px`;
    const frame = inner();
    const target = line ? "about:blank" : src;
    if (frame && target && frame.getAttribute("src") !== target) {
      calm();
      frame.setAttribute("src", target);
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
