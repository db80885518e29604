"""Stage 4, word: a summary's and a comparison's words, text and static HTML.

:mod:`.headline` words the verdict (headline, fix, evidence) and :mod:`.notes` the
headlines, once, when the summary is built; :mod:`.text` and :mod:`.html` render a finished
summary (:mod:`.chart`, :mod:`.breakdown_chart` its inline SVG), :mod:`.comparison` two
runs side by side; :mod:`.shown` registers them as how a summary and a comparison display
themselves, so that the model imports no renderer. Its modules import each other directly,
never through this package.
"""
