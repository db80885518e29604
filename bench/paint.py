"""What the first-paint benchmarks read in the browser, on one clock.

:data:`PROBE` runs in every frame the page opens and records, in XProf's trace viewer page,
when the page started, when the host's track was named, when its canvas first held event
slices (``drawn``) and when, so drawn, the timeline was not hidden (``paint``: the page keeps
it hidden until it shows its first range, ``inline.TRACE_SETTLE``); :data:`DATA_TIMING` reads
the trace data request's resource timing. Both :mod:`bench.first_paint` (``%xprof view`` of a
copied capture) and :mod:`bench.first_paint_cell` (a ``%%xprof`` cell that captures) measure
with them.
"""

from __future__ import annotations

__all__ = ["DATA_TIMING", "PROBE"]

# Runs in every frame the page opens; only XProf's trace viewer page records anything.
PROBE = """
(() => {
  // The kernel route writes the page into its frame (about:srcdoc), named xprof-<id>.
  const kernel = location.href === 'about:srcdoc' && window.name.startsWith('xprof-');
  if (!location.pathname.endsWith('trace_viewer_index.html') && !kernel) return;
  const now = () => performance.timeOrigin + performance.now();
  const found = {page: performance.timeOrigin, tracks: null, paint: null};
  window.__firstPaint = found;
  const drawn = () => {
    let canvas = null;
    const all = document.getElementsByTagName('canvas');  // the page's NodeList polyfill
    for (let i = 0; i < all.length; i++) {                 // is not iterable
      const c = all[i];
      if (!c.classList.contains('drawing-container-canvas')) continue;
      if (!canvas || c.width * c.height > canvas.width * canvas.height) canvas = c;
    }
    if (!canvas || canvas.width < 2 || canvas.height < 100) return false;
    const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
    let coloured = 0;
    for (let i = 0; i < pixels.length; i += 4) {
      const r = pixels[i], g = pixels[i + 1], b = pixels[i + 2];
      if (pixels[i + 3] > 0 && Math.max(r, g, b) - Math.min(r, g, b) > 60) coloured++;
      if (coloured >= 1000) return true;
    }
    found.coloured = coloured;
    return false;
  };
  // The timeline a person sees: not while the page keeps it hidden for its first range.
  const shown = () => {
    const view = document.querySelector('tr-ui-timeline-view');
    return !view || getComputedStyle(view).visibility !== 'hidden';
  };
  const frame = () => {
    if (found.tracks === null && document.querySelector('span.process-track-name')) {
      found.tracks = now();
    }
    try {
      if (found.tracks !== null && found.drawn == null && drawn()) found.drawn = now();
      if (found.drawn != null && shown()) { found.paint = now(); return; }
    } catch (error) {
      found.error = String(error);
    }
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
})();
"""

DATA_TIMING = """
() => performance.getEntriesByType('resource')
  .filter(e => e.name.includes('/data?') && e.name.includes('trace_viewer'))
  .map(e => ({start: performance.timeOrigin + e.requestStart,
              first_byte: performance.timeOrigin + e.responseStart,
              end: performance.timeOrigin + e.responseEnd,
              bytes: e.encodedBodySize, decoded: e.decodedBodySize,
              transferred: e.transferSize, query: e.name.split('?')[1]}))
"""
