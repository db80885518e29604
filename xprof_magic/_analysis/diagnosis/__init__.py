"""Stage 3, diagnose: what bounds the cell, as data.

:mod:`.breakdown` splits each step's time (and the cell's) by category; :mod:`.verdict`
decides the bottleneck, its share and every other's, its cause, where in the cell, and which
fix (a key of the backend's advice); :mod:`.own` tells the host's time that is the user's own
Python from the framework's, and its line; :mod:`.compare` puts two summaries side by side. No
sentence is written here: the render stage words it. Its modules import each other
directly, never through this package.
"""
