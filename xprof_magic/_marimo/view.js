// The view of a run under a marimo cell: its summary, a runs / tool / host choice and
// XProf's page. The state lives in Python (xprof_magic/_marimo/view.py); this draws it and
// sends back what the person picks.

const WRAPPER =
  "<!doctype html><html><head><style>html,body{margin:0;height:100%;overflow:hidden}" +
  "iframe{border:0;width:100%;height:100%}</style>" +
  // XProf's page calls history.pushState on its parent; here that parent is this wrapper.
  "<script>history.pushState=history.replaceState=function(){};</script></head><body>" +
  "<iframe class='xprof-inner' allow='clipboard-write; fullscreen'></iframe></body></html>";

function element(tag, className, parent, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function choice(parent, name, className) {
  const label = element("label", "xprof-choice", parent);
  element("span", "", label, name);
  return element("select", className, label);
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
  const root = element("div", "xprof-view", el);
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
  const outer = element("iframe", "xprof-outer", root);
  outer.srcdoc = WRAPPER;
  let loaded = false;

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

  // A new selection changes the inner page's address; the frames themselves stay.
  const point = () => {
    const src = model.get("src");
    outer.hidden = !src;
    outer.style.height = `${model.get("height")}px`;
    const inner = loaded && outer.contentDocument?.querySelector("iframe.xprof-inner");
    if (inner && src && inner.getAttribute("src") !== src) inner.setAttribute("src", src);
  };
  outer.addEventListener("load", () => {
    loaded = true;
    point();
  });
  const draw = () => {
    fill(runs, model.get("runs"), model.get("run"));
    fill(tools, model.get("tools"), model.get("tool"));
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
  const traits = ["runs", "run", "tools", "tool", "hosts", "host", "full", "status", "src", "height"];
  for (const trait of traits) model.on(`change:${trait}`, draw);
  model.on("change:summary", drawSummary);
  draw();
  drawSummary();
  return () => {
    for (const trait of traits) model.off(`change:${trait}`, draw);
    model.off("change:summary", drawSummary);
  };
}

export default { render };
