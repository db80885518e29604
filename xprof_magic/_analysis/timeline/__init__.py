"""Stage 1, read: one host's ``<host>.xplane.pb`` -> :class:`~.facts.TraceFacts`.

:func:`~.trace.read_trace` is the entry: the file mapped and split into planes and lines
(:mod:`.space`), each plane's metadata through the protobuf runtime and a schema of its own
(:mod:`.xspace`), each line (thread) decoded into arrays (:mod:`.wire`, :mod:`.lines`),
nested by time (:mod:`.nesting`); :mod:`.reader` reads a host line by the rules of :mod:`.events`,
:mod:`.device_planes` a device's plane; a big plane's biggest lines go to worker processes
(:mod:`.parallel`, :mod:`.pool`, :mod:`.worker`). What comes out is plain facts
(:mod:`.facts`), which every later stage reads instead of the file. Its modules import each
other directly, never through this package.
"""
