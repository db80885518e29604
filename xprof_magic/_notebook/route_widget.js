// The kernel route's end in the browser: an anywidget view with nothing to show, whose
// element carries `xprofRoute`, which the widget's wrapper frame (same origin, a srcdoc
// frame) finds beside it and asks for the viewer's replies through the kernel
// (xprof_magic/_notebook/route.py). A request is one custom message; its reply comes back
// as several: `taken` when the kernel reads it (a busy kernel reads none until its cell
// ends), the head, the body in chunks (binary buffers), then `last`.
function render({ model, el }) {
  const pending = new Map();
  let next = 0;
  el.classList.add("xprof-route");
  el.style.display = "none";
  model.on("msg:custom", (msg, buffers) => {
    if (!msg || msg.type !== "xprof-answer") return;
    const asked = pending.get(msg.id);
    if (!asked) return;
    if (msg.taken && asked.taken) asked.taken();
    if (msg.head) asked.head = msg.head;
    for (const b of buffers || []) {
      asked.parts.push(b instanceof ArrayBuffer ? new Uint8Array(b)
        : new Uint8Array(b.buffer, b.byteOffset, b.byteLength));
    }
    if (msg.last) {
      pending.delete(msg.id);
      const head = asked.head || { status: 502, reason: "Bad Gateway", headers: {} };
      asked.resolve({ ...head, body: new Blob(asked.parts) });
    }
  });
  el.xprofRoute = {
    ask(path, taken) {
      return new Promise((resolve, reject) => {
        const id = ++next;
        pending.set(id, { resolve, reject, taken, parts: [], head: null });
        model.send({ type: "xprof-ask", id, path });
      });
    },
  };
  return () => {
    for (const asked of pending.values()) asked.reject(new Error("the view was closed"));
    pending.clear();
    delete el.xprofRoute;
  };
}
export default { render };
