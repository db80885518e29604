"""After the analysis: a summary's and a comparison's words, text and static HTML.

The summary holds figures; this stage words them when it is shown: :mod:`.headline` the
verdict (:func:`.headline.said`: headline, fix, evidence) and :mod:`.notes` the headlines
(:func:`.notes.notes_of`); nothing in the analysis imports it. :mod:`.text` and
:mod:`.html` render a finished summary (:mod:`.chart`, :mod:`.breakdown_chart` its inline
SVG), :mod:`.comparison` two runs side by side; :mod:`.shown` registers them as how a
summary and a comparison display themselves, so that the model imports no renderer. Its
modules import each other directly, never through this package.
"""
